// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Dynamic reports: name -> value for keys known only at run time (a filtered
// torch.cuda.memory_stats(), user metrics). Insertion order is the report's order; ranks that
// reduce a dynamic report together must build the same keys in the same order, which the
// reducers check (see reducer.hpp).
//
// The key list (names, their index, per-name hashes) is shared between copies and only cloned
// when a copy adds a key, so a reduction's result reuses its input's keys: producing it costs
// one vector of values, with no string work, whatever the key names.
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/stats/detail/schema.hpp"
#include "headroom/stats/value.hpp"

namespace headroom::stats {

/// An integer type accepted by dynamic_report::set: any integer but bool and the char types.
template <class T>
concept integer_stat = std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, char> &&
                       !std::same_as<T, char8_t> && !std::same_as<T, char16_t> && !std::same_as<T, char32_t> &&
                       !std::same_as<T, wchar_t>;

class dynamic_report {
  struct key_list {
    std::vector<std::string> names;
    std::vector<std::uint64_t> name_hashes;
    std::map<std::string, std::size_t, std::less<>> index;
  };

 public:
  /// One key and its value, as seen through iteration or operator[] (views into the report).
  struct entry {
    std::string_view name;
    stats::value const& value;
  };

  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = entry;
    using difference_type = std::ptrdiff_t;
    using reference = entry;
    iterator() = default;
    iterator(dynamic_report const* r, std::size_t i) : r_(r), i_(i) {}
    entry operator*() const { return (*r_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    iterator operator++(int) {
      auto t = *this;
      ++i_;
      return t;
    }
    friend bool operator==(iterator const&, iterator const&) = default;

   private:
    dynamic_report const* r_ = nullptr;
    std::size_t i_ = 0;
  };

  dynamic_report() = default;

  /// Sets `name` to an integer value, appending the key if new (its position is kept otherwise).
  /// Unsigned values above INT64_MAX are rejected (stats are exact int64).
  template <integer_stat T>
  dynamic_report& set(std::string_view name, T v) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(std::int64_t)) {
      expects(v <= static_cast<T>(std::numeric_limits<std::int64_t>::max()), "stats::dynamic_report::set(\"", name,
              "\"): ", v, " does not fit in int64 (max ", std::numeric_limits<std::int64_t>::max(), ")");
    }
    return put(name, stats::value(std::in_place_index<0>, static_cast<std::int64_t>(v)));
  }
  /// Sets `name` to a floating-point value (stored as double).
  template <std::floating_point T>
  dynamic_report& set(std::string_view name, T v) {
    return put(name, stats::value(std::in_place_index<1>, static_cast<double>(v)));
  }
  /// Sets `name` to a run-time value (exactly a stats::value: no implicit bool/char conversions).
  template <std::same_as<stats::value> V>
  dynamic_report& set(std::string_view name, V const& v) {
    return put(name, v);
  }

  [[nodiscard]] std::size_t size() const noexcept { return values_.size(); }
  [[nodiscard]] bool empty() const noexcept { return values_.empty(); }
  [[nodiscard]] bool contains(std::string_view name) const { return position(name).has_value(); }

  [[nodiscard]] std::optional<stats::value> find(std::string_view name) const {
    auto const i = position(name);
    if (!i) return std::nullopt;
    return values_[*i];
  }
  /// The value of `name`; throws invalid_argument naming the key when absent.
  [[nodiscard]] stats::value const& at(std::string_view name) const {
    auto const i = position(name);
    expects(i.has_value(), "stats::dynamic_report: no key \"", name, "\" among ", size(), " keys");
    return values_[*i];
  }
  /// The integer value of `name`; throws invalid_argument when absent or a double.
  [[nodiscard]] std::int64_t integer(std::string_view name) const {
    auto const& v = at(name);
    expects(v.index() == 0, "stats::dynamic_report: key \"", name, "\" holds a float64, expected an int64");
    return std::get<0>(v);
  }
  /// The double value of `name`; throws invalid_argument when absent or an integer.
  [[nodiscard]] double real(std::string_view name) const {
    auto const& v = at(name);
    expects(v.index() == 1, "stats::dynamic_report: key \"", name, "\" holds an int64, expected a float64");
    return std::get<1>(v);
  }

  /// Key i and its value; throws invalid_argument past the end.
  [[nodiscard]] entry operator[](std::size_t i) const {
    expects(i < size(), "stats::dynamic_report[", i, "]: index out of range [0, ", size(), ")");
    return {keys_->names[i], values_[i]};
  }
  [[nodiscard]] iterator begin() const noexcept { return {this, 0}; }
  [[nodiscard]] iterator end() const noexcept { return {this, size()}; }
  [[nodiscard]] std::vector<stats::value> const& values() const noexcept { return values_; }

  /// A report with the same keys and the given values (one per key, any kinds): how reducers
  /// build their result without touching the names.
  [[nodiscard]] dynamic_report with_values(std::vector<stats::value> values) const {
    expects(values.size() == size(), "stats::dynamic_report::with_values: ", values.size(), " values for ", size(),
            " keys");
    dynamic_report r;
    r.keys_ = keys_;
    bool same_kinds = true;
    for (std::size_t i = 0; i < values.size() && same_kinds; ++i) same_kinds = values[i].index() == values_[i].index();
    r.values_ = std::move(values);
    if (same_kinds) r.hash_ = hash_;
    else r.rehash();
    return r;
  }

  /// Hash of (name, kind) of every key in order, as reduced by max; equals the typed report's
  /// schema_hash() for the same fields.
  /// Kept up to date by set() (O(1) per new key), so reducing a report costs no hashing.
  [[nodiscard]] std::uint64_t schema_hash() const noexcept { return hash_; }

  /// Copy with every key renamed prefix + name (e.g. "memory/" for a dashboard).
  [[nodiscard]] dynamic_report prefixed(std::string_view prefix) const {
    dynamic_report r;
    for (std::size_t i = 0; i < size(); ++i) r.put(std::string(prefix) + keys_->names[i], values_[i]);
    return r;
  }

  /// Same keys, order and values (kinds included: int 3 differs from double 3.0; doubles compare
  /// bitwise so -0.0 != 0.0 and NaN == NaN, which is what a reduction test needs).
  friend bool operator==(dynamic_report const& a, dynamic_report const& b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      auto const& x = a.values_[i];
      auto const& y = b.values_[i];
      if (x.index() != y.index()) return false;
      if (x.index() == 0 ? std::get<0>(x) != std::get<0>(y)
                         : std::bit_cast<std::uint64_t>(std::get<1>(x)) != std::bit_cast<std::uint64_t>(std::get<1>(y)))
        return false;
    }
    return a.keys_ == b.keys_ || a.keys_->names == b.keys_->names;
  }

  friend std::ostream& operator<<(std::ostream& os, dynamic_report const& r) {
    os << "{";
    for (std::size_t i = 0; i < r.size(); ++i) {
      os << (i == 0 ? "" : ", ") << r.keys_->names[i] << ": ";
      print_value(os, r.values_[i]);
    }
    return os << "}";
  }

 private:
  [[nodiscard]] std::optional<std::size_t> position(std::string_view name) const {
    if (!keys_) return std::nullopt;
    auto const it = keys_->index.find(name);
    if (it == keys_->index.end()) return std::nullopt;
    return it->second;
  }

  dynamic_report& put(std::string_view name, stats::value v) {
    expects(!name.empty(), "stats::dynamic_report::set: empty key name");
    if (auto const i = position(name)) {
      bool const kind_changed = values_[*i].index() != v.index();
      values_[*i] = v;
      if (kind_changed) rehash();
      return *this;
    }
    // A new key: clone the key list first if another report shares it.
    auto keys = (keys_ && keys_.use_count() == 1) ? keys_ : std::make_shared<key_list>(keys_ ? *keys_ : key_list{});
    keys->index.emplace(std::string(name), keys->names.size());
    keys->names.emplace_back(name);
    keys->name_hashes.push_back(detail::hash_name(name));
    values_.push_back(v);
    hash_ = detail::hash_key(hash_, keys->name_hashes.back(), kind_of(v), reduce_op::max);
    keys_ = std::move(keys);
    return *this;
  }

  void rehash() noexcept {
    std::uint64_t h = detail::schema_seed;
    for (std::size_t i = 0; i < values_.size(); ++i) h = detail::hash_key(h, keys_->name_hashes[i], kind_of(values_[i]), reduce_op::max);
    hash_ = h;
  }

  std::shared_ptr<key_list> keys_;
  std::vector<stats::value> values_;
  std::uint64_t hash_ = detail::schema_seed;  // schema_hash() of the current keys and kinds
};

}  // namespace headroom::stats
