// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// checked_report: a dynamic report built from values nobody has checked yet (a counter read
// as uint64, a value from Python, a parsed log line). A bad value does not throw: the report
// records it (the first one: key, value, what was expected) and still takes part in the
// reduction, which carries "this rank's input is invalid" in the same collective as the data.
// So every rank of the group throws invalid_argument naming the rank, the key and the value,
// and the group is one collective further on every rank (usable for the next call), instead of
// one rank throwing before the collective and the others waiting in it.
//
// Booleans are stored as int64 0 / 1, and their bool-ness is part of the schema hash: ranks
// that disagree on whether a key is a bool or an int get collective_mismatch, as for int vs
// double.
//
//   stats::checked_report r;
//   r.set("allocated_bytes.all.peak", std::uint64_t{bytes});   // > INT64_MAX: recorded
//   r.set("oom", false).reject("ratio", "'n/a'", "a float");     // a value of a wrong type
//   auto peak = reducer.max(r, comm);   // every rank: invalid_argument "rank 3: key 'ratio' = 'n/a' ..."
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/stats/detail/schema.hpp"
#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/value.hpp"

namespace headroom::stats {

/// The first bad value of a checked_report: its key, the value as text and what was expected.
struct value_fault {
  std::string key;
  std::string value;
  std::string expected;

  /// "key 'k' = v; expected e": each part cut to a length that keeps the sentence short enough
  /// for the reducers' wire (reduce_plan::fault_text_bytes).
  [[nodiscard]] std::string sentence() const {
    return "key '" + cut(key, 40) + "' = " + cut(value, 24) + "; expected " + cut(expected, 32);
  }

 private:
  // Cut at a UTF-8 character boundary, so the sentence stays valid text on every rank.
  static std::string cut(std::string const& s, std::size_t n) {
    if (s.size() <= n) return s;
    std::size_t end = n - 3;
    while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0u) == 0x80u) --end;
    return s.substr(0, end) + "...";
  }
};

class checked_report {
 public:
  checked_report() = default;

  /// An integer value; an unsigned one above INT64_MAX is recorded as the fault.
  template <integer_stat T>
  checked_report& set(std::string_view name, T v) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(std::int64_t)) {
      if (v > static_cast<T>(std::numeric_limits<std::int64_t>::max()))
        return reject(name, std::to_string(v), "an integer that fits in int64");
    }
    return put(name, stats::value(std::in_place_index<0>, static_cast<std::int64_t>(v)), false);
  }
  template <std::floating_point T>
  checked_report& set(std::string_view name, T v) {
    return put(name, stats::value(std::in_place_index<1>, static_cast<double>(v)), false);
  }
  /// A boolean: carried as int64 0 / 1; is_bool(i) says so, and the schema hash includes it.
  template <std::same_as<bool> B>
  checked_report& set(std::string_view name, B v) {
    return put(name, stats::value(std::in_place_index<0>, std::int64_t{v ? 1 : 0}), true);
  }
  /// Records a value that is not a statistic at all (`value` as text, what was `expected`).
  /// Only the first fault is kept; the key is not added.
  checked_report& reject(std::string_view name, std::string_view value, std::string_view expected) {
    if (!fault_) fault_ = value_fault{std::string(name), std::string(value), std::string(expected)};
    return *this;
  }

  [[nodiscard]] std::optional<value_fault> const& fault() const noexcept { return fault_; }
  [[nodiscard]] bool valid() const noexcept { return !fault_.has_value(); }
  /// The values that were accepted (bools as 0 / 1).
  [[nodiscard]] dynamic_report const& report() const noexcept { return report_; }
  [[nodiscard]] std::size_t size() const noexcept { return report_.size(); }
  [[nodiscard]] bool empty() const noexcept { return report_.empty(); }
  [[nodiscard]] bool is_bool(std::size_t i) const noexcept { return i < bools_.size() && bools_[i]; }

  /// The dynamic report's schema hash, with each bool key's position folded in (unchanged when
  /// there is none, so a report without bools agrees with a dynamic_report or typed report).
  [[nodiscard]] std::uint64_t schema_hash() const noexcept {
    std::uint64_t h = report_.schema_hash();
    for (std::size_t i = 0; i < bools_.size(); ++i)
      if (bools_[i]) h = detail::hash_key(h, i, value_kind::int64, reduce_op::sum);  // sum: a tag no key uses
    return h;
  }

 private:
  checked_report& put(std::string_view name, stats::value v, bool is_bool) {
    if (name.empty()) return reject(name, "''", "a non-empty key name");
    std::size_t const before = report_.size();
    report_.set(name, v);
    if (report_.size() > before) bools_.push_back(is_bool);
    else
      for (std::size_t i = 0; i < before; ++i)
        if (report_[i].name == name) bools_[i] = is_bool;
    return *this;
  }

  dynamic_report report_;
  std::vector<bool> bools_;
  std::optional<value_fault> fault_;
};

}  // namespace headroom::stats
