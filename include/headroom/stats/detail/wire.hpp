#pragma once
#include "headroom/core/require_cxx20.hpp"
// Packing reports into the reducers' int64 words, and checking the headers that came back.
// Every check here runs on data every rank received identically, so every rank reaches the
// same verdict and throws the same error: no rank is left waiting in a collective.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/stats/detail/order_key.hpp"
#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/plan.hpp"
#include "headroom/stats/report.hpp"
#include "headroom/stats/table.hpp"

namespace headroom::stats::detail {

/// Uniform read access to a typed or dynamic report for packing: size, hash, names, kinds, ops.
template <class R>
struct report_access;

template <>
struct report_access<dynamic_report> {
  static std::size_t size(dynamic_report const& r) noexcept { return r.size(); }
  static std::uint64_t hash(dynamic_report const& r) noexcept { return r.schema_hash(); }
  static std::string_view name(dynamic_report const& r, std::size_t i) { return r[i].name; }
  static value_kind kind(dynamic_report const& r, std::size_t i) { return kind_of(r[i].value); }
  static reduce_op op(dynamic_report const&, std::size_t) noexcept { return reduce_op::max; }
  static stats::value const& get(dynamic_report const& r, std::size_t i) { return r.values()[i]; }
};

template <class... Fs>
struct report_access<report<Fs...>> {
  using R = report<Fs...>;
  static constexpr std::size_t size(R const&) noexcept { return R::size(); }
  static constexpr std::uint64_t hash(R const&) noexcept { return R::schema_hash(); }
  static std::string_view name(R const&, std::size_t i) { return R::names[i]; }
  static value_kind kind(R const&, std::size_t i) { return R::kinds[i]; }
  static reduce_op op(R const&, std::size_t i) noexcept { return R::ops[i]; }
  static stats::value get(R const& r, std::size_t i) {
    stats::value out;
    std::size_t k = 0;
    r.for_each([&](std::string_view, auto v) {
      if (k++ == i) out = v;
    });
    return out;
  }
};

/// The first few keys of a report, for error messages.
template <class R>
[[nodiscard]] std::string preview_keys(R const& r) {
  using A = report_access<R>;
  std::string s = "[";
  std::size_t const n = A::size(r);
  for (std::size_t i = 0; i < n && i < 4; ++i) {
    if (i > 0) s += ", ";
    s += A::name(r, i);
    s += ":";
    s += name_of(A::kind(r, i));
  }
  if (n > 4) s += ", ... " + std::to_string(n - 4) + " more";
  return s + "]";
}

[[nodiscard]] inline std::int64_t encode_value(stats::value const& v, reduce_op op, bool nan_propagates) noexcept {
  return v.index() == 0 ? encode(std::get<0>(v), op) : encode(std::get<1>(v), op, nan_propagates);
}
[[nodiscard]] inline stats::value decode_value(std::int64_t k, value_kind kind, reduce_op op) noexcept {
  if (kind == value_kind::int64) return stats::value(std::in_place_index<0>, decode_int(k, op));
  return stats::value(std::in_place_index<1>, decode_double(k, op));
}
[[nodiscard]] inline std::int64_t raw_bits(stats::value const& v) noexcept {
  return v.index() == 0 ? std::get<0>(v) : std::bit_cast<std::int64_t>(std::get<1>(v));
}
[[nodiscard]] inline stats::value from_raw_bits(std::int64_t w, value_kind kind) noexcept {
  if (kind == value_kind::int64) return stats::value(std::in_place_index<0>, w);
  return stats::value(std::in_place_index<1>, std::bit_cast<double>(w));
}

// ---- max -----------------------------------------------------------------------------------

template <class R>
void pack_max(R const& r, int writer, bool nan_propagates, std::span<std::int64_t> words) {
  using A = report_access<R>;
  std::size_t const n = A::size(r);
  auto const hash = std::bit_cast<std::int64_t>(A::hash(r));
  auto const count = static_cast<std::int64_t>(n);
  std::int64_t const header[reduce_plan::max_header_words] = {hash, ~hash, count, ~count, writer, ~std::int64_t{writer}};
  std::copy(std::begin(header), std::end(header), words.begin());
  auto values = words.subspan(reduce_plan::max_header_words);
  std::fill(values.begin(), values.end(), key_min);  // neutral for max
  if (n > values.size()) return;                     // over capacity: header only, everyone throws below
  if constexpr (typed_report<R>) {
    std::size_t i = 0;
    r.for_each([&](std::string_view, auto v) {
      values[i] = encode_value(stats::value(v), A::op(r, i), nan_propagates);
      ++i;
    });
  } else {
    for (std::size_t i = 0; i < n; ++i) values[i] = encode_value(A::get(r, i), A::op(r, i), nan_propagates);
  }
}

/// Checks the reduced header; returns the agreed writer (-1: every rank).
template <class R>
int check_max_header(R const& r, std::span<std::int64_t const> out, std::size_t capacity, int rank, int size,
                     char const* what) {
  using A = report_access<R>;
  std::int64_t const hash_max = out[0], hash_min = ~out[1];
  std::int64_t const count_max = out[2], count_min = ~out[3];
  std::int64_t const writer_max = out[4], writer_min = ~out[5];
  expects<capacity_error>(static_cast<std::uint64_t>(count_max) <= capacity, what, ": a rank's report has ", count_max,
                          " keys but the reduce_plan holds ", capacity, "; build the plan with capacity >= ",
                          count_max, " on every rank (this rank, ", rank, ", has ", A::size(r), ")");
  if (hash_max != hash_min || count_max != count_min) {
    std::ostringstream os;
    os << what << ": the " << size << " ranks' reports differ in keys, order or element types";
    if (count_max != count_min) os << " (key counts range from " << count_min << " to " << count_max << ")";
    else os << " (same key count " << count_max << ", different schema hashes)";
    if (count_min == 0) os << "; at least one rank's report is empty";
    os << "; this rank (" << rank << ") has " << A::size(r) << " keys " << preview_keys(r) << ", schema hash 0x"
       << std::hex << A::hash(r) << std::dec << ". Every rank must build the same keys in the same order";
    throw collective_mismatch(os.str());
  }
  expects<collective_mismatch>(writer_max == writer_min, what, ": ranks named different writer ranks (from ",
                               writer_min, " to ", writer_max, "); every rank must pass the same writer");
  expects(writer_max == -1 || (writer_max >= 0 && writer_max < size), what, ": writer rank ", writer_max,
          " out of range [0, ", size, ")");
  return static_cast<int>(writer_max);
}

template <class R>
[[nodiscard]] R unpack_max(R const& like, std::span<std::int64_t const> out) {
  using A = report_access<R>;
  auto const values = out.subspan(reduce_plan::max_header_words);
  if constexpr (typed_report<R>) {
    R result;
    std::size_t i = 0;
    result.for_each([&](std::string_view, auto& v) {
      auto const d = decode_value(values[i], A::kind(like, i), A::op(like, i));
      v = std::get<std::remove_cvref_t<decltype(v)>>(d);
      ++i;
    });
    return result;
  } else {
    std::vector<stats::value> result;
    result.reserve(A::size(like));
    for (std::size_t i = 0; i < A::size(like); ++i) result.push_back(decode_value(values[i], A::kind(like, i), A::op(like, i)));
    return like.with_values(std::move(result));  // shares the input's key names
  }
}

// ---- gather --------------------------------------------------------------------------------

template <class R>
void pack_gather(R const& r, int writer, std::span<std::int64_t> words) {
  using A = report_access<R>;
  std::size_t const n = A::size(r);
  words[0] = std::bit_cast<std::int64_t>(A::hash(r));
  words[1] = static_cast<std::int64_t>(n);
  words[2] = writer;
  auto values = words.subspan(reduce_plan::gather_header_words);
  std::fill(values.begin(), values.end(), 0);
  if (n > values.size()) return;
  if constexpr (typed_report<R>) {
    std::size_t i = 0;
    r.for_each([&](std::string_view, auto v) { values[i++] = raw_bits(stats::value(v)); });
  } else {
    for (std::size_t i = 0; i < n; ++i) values[i] = raw_bits(A::get(r, i));
  }
}

/// Checks every rank's gathered header; returns the agreed writer (-1: every rank).
template <class R>
int check_gather_headers(R const& r, std::span<std::int64_t const> all, std::size_t words_per_rank,
                         std::size_t capacity, int rank, int size, char const* what) {
  auto header = [&](int q, std::size_t w) { return all[static_cast<std::size_t>(q) * words_per_rank + w]; };
  for (int q = 0; q < size; ++q)
    expects<capacity_error>(static_cast<std::uint64_t>(header(q, 1)) <= capacity, what, ": rank ", q, "'s report has ",
                            header(q, 1), " keys but the reduce_plan holds ", capacity,
                            "; build the plan with a larger capacity on every rank");
  bool same = true;
  for (int q = 1; q < size; ++q) same = same && header(q, 0) == header(0, 0) && header(q, 1) == header(0, 1);
  if (!same) {
    std::ostringstream os;
    os << what << ": the " << size << " ranks' reports differ in keys, order or element types:";
    for (int q = 0; q < size; ++q)
      os << " [rank " << q << ": " << header(q, 1) << " keys, schema 0x" << std::hex
         << std::bit_cast<std::uint64_t>(header(q, 0)) << std::dec << "]";
    os << "; this rank (" << rank << ") has " << preview_keys(r) << ". Every rank must build the same keys in the same order";
    throw collective_mismatch(os.str());
  }
  for (int q = 1; q < size; ++q)
    expects<collective_mismatch>(header(q, 2) == header(0, 2), what, ": rank 0 named writer ", header(0, 2),
                                 " but rank ", q, " named ", header(q, 2), "; every rank must pass the same writer");
  std::int64_t const writer = header(0, 2);
  expects(writer == -1 || (writer >= 0 && writer < size), what, ": writer rank ", writer, " out of range [0, ", size, ")");
  return static_cast<int>(writer);
}

/// Builds the per-rank table; max/min use the same order keys as the max reducer.
template <class R>
[[nodiscard]] rank_table unpack_gather(R const& like, std::span<std::int64_t const> all, std::size_t words_per_rank,
                                       int size, bool nan_propagates) {
  using A = report_access<R>;
  std::size_t const n = A::size(like);
  std::vector<stat_summary> rows(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto& row = rows[i];
    row.name = std::string(A::name(like, i));
    row.kind = A::kind(like, i);
    row.per_rank.reserve(static_cast<std::size_t>(size));
    std::int64_t best_max = 0, best_min = 0;
    long double sum = 0;
    std::size_t counted = 0;
    for (int q = 0; q < size; ++q) {
      auto const v = from_raw_bits(all[static_cast<std::size_t>(q) * words_per_rank + reduce_plan::gather_header_words + i],
                                   row.kind);
      row.per_rank.push_back(v);
      std::int64_t const kmax = encode_value(v, reduce_op::max, nan_propagates);
      std::int64_t const kmin = encode_value(v, reduce_op::min, nan_propagates);
      if (q == 0 || kmax > best_max) best_max = kmax, row.argmax = q;  // strict: ties keep the lowest rank
      if (q == 0 || kmin > best_min) best_min = kmin, row.argmin = q;
      double const d = to_double(v);
      if (d == d || nan_propagates) sum += d, ++counted;
    }
    // The holder's own value: bitwise what that rank reported (a NaN keeps its payload).
    row.max = row.per_rank[static_cast<std::size_t>(row.argmax)];
    row.min = row.per_rank[static_cast<std::size_t>(row.argmin)];
    row.mean = counted == 0 ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(sum / static_cast<long double>(counted));
  }
  return rank_table(size, std::move(rows));
}

}  // namespace headroom::stats::detail
