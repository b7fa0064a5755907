// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Packing reports into the reducers' int64 words, and checking the headers that came back.
// Every check here runs on data every rank received identically, so every rank reaches the
// same verdict and throws the same error: no rank is left waiting in a collective.
//
// Checks, in order: the fault block (a rank's checked_report holds a bad value:
// invalid_argument naming that rank, key and value), the plan's capacity, the schema (key
// count, hash), that the agreed schema is this rank's own (words from another reduction:
// collective_mismatch), the writer.
//
// Fault block (reduce_plan::fault_words words): INT64_MIN on a valid rank. A faulty rank
// writes, in every word, its inverted rank in bits 62..40 (so a max keeps the lowest faulty
// rank's words, whole) and 5 bytes of its fault's sentence in bits 39..0.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/stats/checked_report.hpp"
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

template <>
struct report_access<checked_report> {
  using D = report_access<dynamic_report>;
  static std::size_t size(checked_report const& r) noexcept { return r.size(); }
  static std::uint64_t hash(checked_report const& r) noexcept { return r.schema_hash(); }
  static std::string_view name(checked_report const& r, std::size_t i) { return D::name(r.report(), i); }
  static value_kind kind(checked_report const& r, std::size_t i) { return D::kind(r.report(), i); }
  static reduce_op op(checked_report const&, std::size_t) noexcept { return reduce_op::max; }
  static stats::value const& get(checked_report const& r, std::size_t i) { return D::get(r.report(), i); }
};

/// The bad value a report carries (only a checked_report can), or nullptr.
template <class R>
[[nodiscard]] value_fault const* fault_of(R const& r) noexcept {
  if constexpr (std::same_as<R, checked_report>) return r.fault() ? &*r.fault() : nullptr;
  else return nullptr;
}
/// The report a max result is built on: the report itself, or a checked one's values.
template <class R>
[[nodiscard]] auto const& values_of(R const& r) noexcept {
  if constexpr (std::same_as<R, checked_report>) return r.report();
  else return r;
}

// ---- the fault block -------------------------------------------------------------------------

inline constexpr int fault_rank_bits = 23;
inline constexpr std::int64_t fault_rank_limit = (std::int64_t{1} << fault_rank_bits) - 1;

inline void pack_fault(value_fault const* f, int rank, std::span<std::int64_t> block) {
  std::fill(block.begin(), block.end(), key_min);
  if (f == nullptr) return;
  std::string const text = f->sentence();
  auto const r = std::clamp<std::int64_t>(rank, 0, fault_rank_limit);
  auto const tag = static_cast<std::uint64_t>(fault_rank_limit - r) << 40;
  std::size_t at = 0;
  for (auto& w : block) {
    std::uint64_t bits = tag;
    for (int b = 4; b >= 0; --b, ++at)
      bits |= std::uint64_t{at < text.size() ? static_cast<unsigned char>(text[at]) : 0u} << (8 * b);
    w = static_cast<std::int64_t>(bits);
  }
}

struct fault_seen {
  int rank;
  std::string text;
};

/// The fault a block carries, if any (the lowest faulty rank's after a max).
[[nodiscard]] inline std::optional<fault_seen> read_fault(std::span<std::int64_t const> block) {
  if (block.empty() || block[0] == key_min) return std::nullopt;
  auto const tag = static_cast<std::uint64_t>(block[0]) >> 40;
  fault_seen out{static_cast<int>(fault_rank_limit - static_cast<std::int64_t>(tag & fault_rank_limit)), {}};
  for (auto const w : block) {
    if (static_cast<std::uint64_t>(w) >> 40 != tag) break;  // not one rank's block: keep what is whole
    for (int b = 4; b >= 0; --b) {
      auto const c = static_cast<unsigned char>(static_cast<std::uint64_t>(w) >> (8 * b));
      if (c == 0) return out;
      out.text += (c >= 0x20 && c < 0x7f) || c >= 0x80 ? static_cast<char>(c) : '?';
    }
  }
  return out;
}

/// Throws invalid_argument on every rank when the block names a faulty rank: the faulty rank
/// says its whole fault; the others what the wire carried.
template <class R>
void check_fault(R const& r, std::span<std::int64_t const> block, int rank, int size, char const* what) {
  auto const seen = read_fault(block);
  if (!seen) return;
  value_fault const* const mine = fault_of(r);
  std::string const text = seen->rank == rank && mine != nullptr ? mine->sentence() : seen->text;
  throw invalid_argument(headroom::detail::concat(
      what, ": rank ", seen->rank, " of ", size, " has a value that is not a statistic (", text,
      "); no rank reduced, and the group is ready for the next call"));
}

/// The rank and size a caller passed, before they index anything.
inline void check_rank(int rank, int size, char const* what) {
  expects(size >= 1 && rank >= 0 && rank < size, what, ": rank ", rank, " of a group of ", size,
          "; expected 0 <= rank < size");
}

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

/// `rank` is only read when the report carries a fault (checked_report).
template <class R>
void pack_max(R const& r, int writer, bool nan_propagates, std::span<std::int64_t> words, int rank = 0) {
  using A = report_access<R>;
  std::size_t const n = A::size(r);
  auto const hash = std::bit_cast<std::int64_t>(A::hash(r));
  auto const count = static_cast<std::int64_t>(n);
  std::int64_t const header[6] = {hash, ~hash, count, ~count, writer, ~std::int64_t{writer}};
  std::copy(std::begin(header), std::end(header), words.begin());
  pack_fault(fault_of(r), rank, words.subspan(6, reduce_plan::fault_words));
  auto values = words.subspan(reduce_plan::max_header_words);
  std::fill(values.begin(), values.end(), key_min);  // neutral for max
  if (n > values.size() || fault_of(r) != nullptr) return;  // header only: everyone throws below
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
  check_rank(rank, size, what);
  expects(out.size() >= reduce_plan::max_header_words, what, ": ", out.size(), " words; expected at least ",
          reduce_plan::max_header_words);
  check_fault(r, out.subspan(6, reduce_plan::fault_words), rank, size, what);
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
  expects<capacity_error>(A::size(r) <= capacity && out.size() >= reduce_plan::max_header_words + A::size(r), what,
                          ": this rank's report has ", A::size(r), " keys but the reduce_plan holds ", capacity,
                          " (", out.size(), " words)");
  expects<collective_mismatch>(hash_max == std::bit_cast<std::int64_t>(A::hash(r)) &&
                                   count_max == static_cast<std::int64_t>(A::size(r)),
                               what, ": the reduced words carry another schema (", count_max, " keys, hash 0x", std::hex,
                               std::bit_cast<std::uint64_t>(hash_max), std::dec, ") than this rank's report (",
                               A::size(r), " keys ", preview_keys(r),
                               "): they are not the result of a reduction of this report");
  expects<collective_mismatch>(writer_max == writer_min, what, ": ranks named different writer ranks (from ",
                               writer_min, " to ", writer_max, "); every rank must pass the same writer");
  expects(writer_max == -1 || (writer_max >= 0 && writer_max < size), what, ": writer rank ", writer_max,
          " out of range [0, ", size, ")");
  return static_cast<int>(writer_max);
}

/// The max result (a typed report, or a dynamic_report for dynamic and checked reports) from
/// words whose header check_max_header accepted.
template <class R>
[[nodiscard]] auto unpack_max(R const& like, std::span<std::int64_t const> out) {
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
    return values_of(like).with_values(std::move(result));  // shares the input's key names
  }
}

// ---- gather --------------------------------------------------------------------------------

template <class R>
void pack_gather(R const& r, int writer, std::span<std::int64_t> words, int rank = 0) {
  using A = report_access<R>;
  std::size_t const n = A::size(r);
  words[0] = std::bit_cast<std::int64_t>(A::hash(r));
  words[1] = static_cast<std::int64_t>(n);
  words[2] = writer;
  pack_fault(fault_of(r), rank, words.subspan(3, reduce_plan::fault_words));
  auto values = words.subspan(reduce_plan::gather_header_words);
  std::fill(values.begin(), values.end(), 0);
  if (n > values.size() || fault_of(r) != nullptr) return;
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
  check_rank(rank, size, what);
  expects(words_per_rank >= reduce_plan::gather_header_words && all.size() >= words_per_rank * static_cast<std::size_t>(size),
          what, ": ", all.size(), " words for ", size, " ranks of ", words_per_rank, " words");
  auto header = [&](int q, std::size_t w) { return all[static_cast<std::size_t>(q) * words_per_rank + w]; };
  for (int q = 0; q < size; ++q)
    check_fault(r, all.subspan(static_cast<std::size_t>(q) * words_per_rank + 3, reduce_plan::fault_words), rank, size,
                what);
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
  using A = report_access<R>;
  expects<capacity_error>(A::size(r) <= capacity && words_per_rank >= reduce_plan::gather_header_words + A::size(r),
                          what, ": this rank's report has ", A::size(r), " keys but the reduce_plan holds ", capacity);
  expects<collective_mismatch>(header(rank, 0) == std::bit_cast<std::int64_t>(A::hash(r)) &&
                                   header(rank, 1) == static_cast<std::int64_t>(A::size(r)),
                               what, ": the gathered words carry another schema (", header(rank, 1), " keys, hash 0x",
                               std::hex, std::bit_cast<std::uint64_t>(header(rank, 0)), std::dec,
                               ") than this rank's report (", A::size(r), " keys ", preview_keys(r),
                               "): they are not the result of a gather of this report");
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
