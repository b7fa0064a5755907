// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Typed reports: keys, element types and reduction ops fixed at compile time.
//
//   using step_memory = stats::report<
//       stats::field<"allocated_bytes.all.peak", std::int64_t>,
//       stats::field<"num_alloc_retries", std::int64_t>,
//       stats::field<"free_gigabytes", double, stats::minimum>>;
//   step_memory r;
//   r.get<"allocated_bytes.all.peak">() = 12 * GiB;
//
// Two ranks holding the same report type agree on its shape by construction, and its schema
// hash is a compile-time constant.
#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "headroom/stats/detail/fixed_string.hpp"
#include "headroom/stats/detail/schema.hpp"
#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/policies.hpp"
#include "headroom/stats/value.hpp"

namespace headroom::stats {

using detail::fixed_string;

/// One compile-time key: its name, element type (int64 or double) and reduction policy.
/// Checked by static_asserts rather than constraints, so a wrong argument stops at a sentence.
template <fixed_string Name, class T, class Op = maximum>
struct field {
  static_assert(Name.view().size() > 0, "stats::field<name, T>: the name is empty; give the key a name");
  static_assert(stat_value<T>,
                "stats::field<name, T>: T must be std::int64_t or double (values travel as 64-bit words); use "
                "std::int64_t for counts and bytes (not int or std::size_t), double for the rest");
  static_assert(reduction_policy<Op>, "stats::field<name, T, Op>: Op must be stats::maximum or stats::minimum");
  using stats_field_marker = void;
  using value_type = T;
  using policy = Op;
  static constexpr std::string_view name = Name.view();
  static constexpr auto key = Name;
  static constexpr value_kind kind = kind_of_v<T>;
  static constexpr reduce_op op = Op::op;
};

/// A stats::field (detected by its marker: matching on the string template argument trips nvcc).
template <class F>
concept field_type = requires {
  typename F::stats_field_marker;
  { F::name } -> std::convertible_to<std::string_view>;
  requires stat_value<typename F::value_type>;
  requires reduction_policy<typename F::policy>;
};

namespace detail {
template <class... Fs>
[[nodiscard]] consteval bool distinct_names() {
  if constexpr (!(field_type<Fs> && ...)) {
    return true;  // not fields: report's first static_assert says so
  } else {
    std::array<std::string_view, sizeof...(Fs)> const names{Fs::name...};
    for (std::size_t i = 0; i < names.size(); ++i)
      for (std::size_t j = i + 1; j < names.size(); ++j)
        if (names[i] == names[j]) return false;
    return true;
  }
}

template <fixed_string Name, class... Fs>
[[nodiscard]] consteval std::size_t index_of() {
  std::array<std::string_view, sizeof...(Fs)> const names{Fs::name...};
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == Name.view()) return i;
  return names.size();
}

// An unknown key's compile error spells the key and the valid keys as character packs, which
// g++ and clang++ both print as text (a fixed_string argument prints mangled or as numbers).
template <char... Chars>
struct key {};
template <fixed_string Name, std::size_t... I>
auto spell_key(std::index_sequence<I...>) -> key<Name.chars[I]...>;
template <fixed_string Name>
using spelled_key = decltype(spell_key<Name>(std::make_index_sequence<Name.view().size()>{}));
template <class UnknownKey, class... ValidKeys>
inline constexpr bool unknown_key_given_valid_keys = false;
}  // namespace detail

/// A report whose keys, element types and ops are fixed at compile time. Names must differ.
/// Checked by static_asserts rather than constraints, so a wrong argument stops at a sentence.
template <class... Fields>
class report {
  static_assert((field_type<Fields> && ...),
                "stats::report<Fields...>: every argument must be a stats::field<name, T> or "
                "stats::field<name, T, Op>");
  static_assert(detail::distinct_names<Fields...>(),
                "stats::report<Fields...>: two fields have the same name; the names are the keys, so each must "
                "be unique");

 public:
  static constexpr std::size_t size() noexcept { return sizeof...(Fields); }
  static constexpr bool empty() noexcept { return size() == 0; }
  static constexpr std::array<std::string_view, sizeof...(Fields)> names{Fields::name...};
  static constexpr std::array<value_kind, sizeof...(Fields)> kinds{Fields::kind...};
  static constexpr std::array<reduce_op, sizeof...(Fields)> ops{Fields::op...};

  /// Compile-time hash of (name, kind, op) of every field, in order.
  static constexpr std::uint64_t schema_hash() noexcept {
    std::uint64_t h = detail::schema_seed;
    for (std::size_t i = 0; i < size(); ++i) h = detail::hash_key(h, detail::hash_name(names[i]), kinds[i], ops[i]);
    return h;
  }

  /// True when `Name` is one of the fields.
  template <fixed_string Name>
  static constexpr bool contains = detail::index_of<Name, Fields...>() < sizeof...(Fields);

  constexpr report() = default;
  /// Values in field order.
  constexpr explicit report(typename Fields::value_type... values)
    requires(sizeof...(Fields) > 0)
      : values_(values...) {}

  // Unconstrained so that an unknown key stops at the sentence in value_of, not at a
  // constraint failure that prints the key mangled.
  template <fixed_string Name>
  [[nodiscard]] constexpr auto& get() noexcept {
    return value_of<Name>(*this);
  }
  template <fixed_string Name>
  [[nodiscard]] constexpr auto const& get() const noexcept {
    return value_of<Name>(*this);
  }
  template <std::size_t I>
    requires(I < sizeof...(Fields))
  [[nodiscard]] constexpr auto& get() noexcept {
    return std::get<I>(values_);
  }
  template <std::size_t I>
    requires(I < sizeof...(Fields))
  [[nodiscard]] constexpr auto const& get() const noexcept {
    return std::get<I>(values_);
  }

  /// Calls fn(name, value&) for every field in order.
  template <class Fn>
  constexpr void for_each(Fn&& fn) {
    for_each_impl(*this, fn, std::index_sequence_for<Fields...>{});
  }
  template <class Fn>
  constexpr void for_each(Fn&& fn) const {
    for_each_impl(*this, fn, std::index_sequence_for<Fields...>{});
  }

  /// The same keys and values as a dynamic report (ops are not carried: dynamic keys reduce by max).
  [[nodiscard]] dynamic_report to_dynamic() const {
    dynamic_report d;
    for_each([&](std::string_view name, auto v) { d.set(name, v); });
    return d;
  }

  friend constexpr bool operator==(report const&, report const&) = default;

  friend std::ostream& operator<<(std::ostream& os, report const& r) {
    os << "{";
    bool first = true;
    r.for_each([&](std::string_view name, auto v) {
      os << (first ? "" : ", ") << name << ": " << v;
      first = false;
    });
    return os << "}";
  }

 private:
  template <fixed_string Name, class Self>
  static constexpr auto& value_of(Self& self) noexcept {
    if constexpr (contains<Name>) {
      return std::get<detail::index_of<Name, Fields...>()>(self.values_);
    } else {
      static_assert(detail::unknown_key_given_valid_keys<detail::spelled_key<Name>, detail::spelled_key<Fields::key>...>,
                    "stats::report::get<key>: unknown key, spelled out with the valid keys after it in "
                    "unknown_key_given_valid_keys<key<...>, ...> in this diagnostic; use one of the names in the "
                    "report's stats::field list (see headroom/stats/report.hpp), also in report::names");
      return self.values_;  // not reached: the assertion above stops the build
    }
  }

  template <class Self, class Fn, std::size_t... I>
  static constexpr void for_each_impl(Self& self, Fn& fn, std::index_sequence<I...>) {
    (fn(names[I], std::get<I>(self.values_)), ...);
  }

  std::tuple<typename Fields::value_type...> values_{};
};

namespace detail {
template <class... A, class... B, std::size_t... I, std::size_t... J>
[[nodiscard]] constexpr report<A..., B...> join_impl(report<A...> const& a, report<B...> const& b, std::index_sequence<I...>,
                                                     std::index_sequence<J...>) {
  return report<A..., B...>(a.template get<I>()..., b.template get<J>()...);
}
}  // namespace detail

/// The fields of `a` then those of `b` in one report (names must stay distinct: report's
/// static_assert says so otherwise), e.g. an allocator's counts next to the device's free
/// memory, reduced in one collective.
template <class... A, class... B>
[[nodiscard]] constexpr report<A..., B...> join(report<A...> const& a, report<B...> const& b) {
  return detail::join_impl(a, b, std::index_sequence_for<A...>{}, std::index_sequence_for<B...>{});
}

template <class R>
struct is_typed_report : std::false_type {};
template <class... Fs>
struct is_typed_report<report<Fs...>> : std::true_type {};

/// A report type from this header (as opposed to dynamic_report).
template <class R>
concept typed_report = is_typed_report<std::remove_cvref_t<R>>::value;

}  // namespace headroom::stats
