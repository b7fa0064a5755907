#pragma once
// Dynamic reports: name -> value for keys known only at run time (a filtered
// torch.cuda.memory_stats(), user metrics). Insertion order is the report's order; ranks that
// reduce a dynamic report together must build the same keys in the same order, which the
// reducers check (see reducer.hpp).
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
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
 public:
  struct entry {
    std::string name;
    stats::value value;
    friend bool operator==(entry const&, entry const&) = default;
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

  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] bool empty() const noexcept { return entries_.empty(); }
  [[nodiscard]] bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }

  [[nodiscard]] std::optional<stats::value> find(std::string_view name) const {
    auto const it = index_.find(name);
    if (it == index_.end()) return std::nullopt;
    return entries_[it->second].value;
  }
  /// The value of `name`; throws invalid_argument naming the key when absent.
  [[nodiscard]] stats::value const& at(std::string_view name) const {
    auto const it = index_.find(name);
    expects(it != index_.end(), "stats::dynamic_report: no key \"", name, "\" among ", size(), " keys");
    return entries_[it->second].value;
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

  [[nodiscard]] std::vector<entry> const& entries() const noexcept { return entries_; }
  [[nodiscard]] auto begin() const noexcept { return entries_.begin(); }
  [[nodiscard]] auto end() const noexcept { return entries_.end(); }
  [[nodiscard]] entry const& operator[](std::size_t i) const { return entries_.at(i); }

  /// Hash of (name, kind) of every key in order, as reduced by max.
  [[nodiscard]] std::uint64_t schema_hash() const noexcept {
    std::uint64_t h = detail::fnv_offset;
    for (auto const& e : entries_) h = detail::hash_key(h, e.name, kind_of(e.value), reduce_op::max);
    return h;
  }

  /// Copy with every key renamed prefix + name (e.g. "memory/" for a dashboard).
  [[nodiscard]] dynamic_report prefixed(std::string_view prefix) const {
    dynamic_report r;
    for (auto const& e : entries_) r.put(std::string(prefix) + e.name, e.value);
    return r;
  }

  /// Same keys, order and values (kinds included: int 3 differs from double 3.0; doubles compare
  /// bitwise so -0.0 != 0.0 and NaN == NaN, which is what a reduction test needs).
  friend bool operator==(dynamic_report const& a, dynamic_report const& b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      auto const& x = a.entries_[i];
      auto const& y = b.entries_[i];
      if (x.name != y.name || x.value.index() != y.value.index()) return false;
      if (x.value.index() == 0 ? std::get<0>(x.value) != std::get<0>(y.value)
                               : std::bit_cast<std::uint64_t>(std::get<1>(x.value)) !=
                                     std::bit_cast<std::uint64_t>(std::get<1>(y.value)))
        return false;
    }
    return true;
  }

  friend std::ostream& operator<<(std::ostream& os, dynamic_report const& r) {
    os << "{";
    for (std::size_t i = 0; i < r.size(); ++i) {
      os << (i == 0 ? "" : ", ") << r.entries_[i].name << ": ";
      print_value(os, r.entries_[i].value);
    }
    return os << "}";
  }

 private:
  dynamic_report& put(std::string_view name, stats::value v) {
    expects(!name.empty(), "stats::dynamic_report::set: empty key name");
    auto const it = index_.find(name);
    if (it != index_.end()) {
      entries_[it->second].value = v;
    } else {
      index_.emplace(std::string(name), entries_.size());
      entries_.push_back({std::string(name), v});
    }
    return *this;
  }

  std::vector<entry> entries_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

}  // namespace headroom::stats
