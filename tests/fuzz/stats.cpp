// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the stats wire format (order keys, max / gather headers and payloads) and the
// reducers on 1- and 3-rank thread groups.
//
//   - order keys: decode(encode(x)) == x bitwise for every int64 and non-NaN double; the keys
//     order like the values (min reverses), -0.0 below +0.0, NaN at the propagate/ignore end;
//   - arbitrary words handed to the header checks: a headroom::error or a verdict, never UB;
//   - simulated groups of 1..4 ranks whose reports mostly share a schema: packed, reduced as
//     the collective would (elementwise max / concatenation), checked by every rank. Same
//     schema, writer and capacity -> no error and exact results (max, argmax, argmin, per-rank
//     values bitwise, mean within [min, max]); any disagreement -> an error on every rank;
//   - sometimes the real reducer on a thread group of 1 or 3 ranks: same verdict on every
//     rank, and the same values as the simulation.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "headroom/core/error.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/stats.hpp"
#include "headroom/stats/detail/wire.hpp"

namespace {

namespace st = headroom::stats;
namespace sd = headroom::stats::detail;
using headroom::reduce_op;

void check_order_keys(fuzz::input& in) {
  auto const a = in.take<std::int64_t>();
  auto const b = in.take<std::int64_t>();
  for (reduce_op op : {reduce_op::max, reduce_op::min}) {
    FUZZ_CHECK(sd::decode_int(sd::encode(a, op), op) == a);
    bool const reversed = op == reduce_op::min;
    if (a != b) FUZZ_CHECK((sd::encode(a, op) < sd::encode(b, op)) == ((a < b) != reversed));
  }
  double const x = in.take_double();
  double const y = in.take_double();
  for (reduce_op op : {reduce_op::max, reduce_op::min}) {
    bool const reversed = op == reduce_op::min;
    for (bool prop : {true, false}) {
      auto const kx = sd::encode(x, op, prop);
      if (std::isnan(x)) {
        FUZZ_CHECK(kx == (prop ? sd::key_max : sd::key_min) && std::isnan(sd::decode_double(kx, op)));
        continue;
      }
      FUZZ_CHECK(std::bit_cast<std::uint64_t>(sd::decode_double(kx, op)) == std::bit_cast<std::uint64_t>(x));
      FUZZ_CHECK(kx != sd::key_max && kx != sd::key_min);
      if (std::isnan(y)) continue;
      auto const ky = sd::encode(y, op, prop);
      bool const less = x < y || (x == 0 && y == 0 && std::signbit(x) && !std::signbit(y));
      bool const same = std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
      if (!same) FUZZ_CHECK((kx < ky) == (less != reversed));
    }
  }
}

// A report of up to 6 keys from a small alphabet (so schemas often coincide).
st::dynamic_report draw_report(fuzz::input& in, std::size_t keys) {
  static constexpr char const* names[] = {"allocated_bytes.all.peak", "reserved_bytes.all.current", "num_ooms", "a", "b"};
  st::dynamic_report r;
  for (std::size_t i = 0; i < keys; ++i) {
    std::string name = names[in.in<std::size_t>(0, std::size(names) - 1)];
    name += std::to_string(i);
    if (in.flag())
      r.set(name, in.take<std::int64_t>());
    else
      r.set(name, in.take_double());
  }
  return r;
}

// A report with `like`'s keys and kinds and fresh values.
st::dynamic_report same_schema(st::dynamic_report const& like, fuzz::input& in) {
  std::vector<st::value> v;
  for (auto const& x : like.values())
    v.push_back(x.index() == 0 ? st::value(std::in_place_index<0>, in.take<std::int64_t>())
                               : st::value(std::in_place_index<1>, in.take_double()));
  return like.with_values(std::move(v));
}

bool bitwise_equal(st::value const& a, st::value const& b) { return sd::raw_bits(a) == sd::raw_bits(b) && a.index() == b.index(); }

// Reference max of one key over the ranks, NaN propagating: plain comparisons, +0 above -0.
st::value reference_max(std::vector<st::dynamic_report> const& reports, std::size_t i) {
  st::value best = reports[0].values()[i];
  for (auto const& r : reports) {
    auto const& v = r.values()[i];
    if (v.index() == 0) {
      if (std::get<0>(v) > std::get<0>(best)) best = v;
      continue;
    }
    double const d = std::get<1>(v), b = std::get<1>(best);
    if (std::isnan(b)) continue;
    if (std::isnan(d) || d > b || (d == 0 && b == 0 && !std::signbit(d))) best = v;
  }
  return best;
}

struct group_case {
  std::vector<st::dynamic_report> reports;  // one per rank
  std::vector<int> writers;
  std::size_t capacity = 0;
  bool same_schema = false;  // every rank: same keys and kinds, within the capacity
  bool agree = false;        // and the same valid writer
};

group_case draw_group(fuzz::input& in) {
  group_case g;
  int const size = in.in<int>(1, 4);
  auto const base = draw_report(in, in.in<std::size_t>(0, 6));
  int const writer = in.in<int>(0, 7) == 0 ? in.in<int>(-3, 5) : (in.flag() ? -1 : in.in<int>(0, size - 1));
  for (int r = 0; r < size; ++r) {
    if (in.in<int>(0, 7) == 0)
      g.reports.push_back(draw_report(in, in.in<std::size_t>(0, 6)));  // probably another schema
    else
      g.reports.push_back(same_schema(base, in));
    g.writers.push_back(in.in<int>(0, 15) == 0 ? in.in<int>(-2, 4) : writer);
  }
  g.capacity = in.in<int>(0, 7) == 0 ? in.in<std::size_t>(0, 6) : 6;
  g.same_schema = g.reports[0].size() <= g.capacity;
  bool same_writer = g.writers[0] >= -1 && g.writers[0] < size;
  for (int r = 0; r < size; ++r) {
    auto const& rep = g.reports[static_cast<std::size_t>(r)];
    g.same_schema = g.same_schema && rep.schema_hash() == g.reports[0].schema_hash() && rep.size() == g.reports[0].size();
    same_writer = same_writer && g.writers[static_cast<std::size_t>(r)] == g.writers[0];
  }
  g.agree = g.same_schema && same_writer;
  return g;
}

// Every rank's verdict on the simulated max: throws on all or on none, and exact when none.
void simulate_max(group_case const& g) {
  int const size = static_cast<int>(g.reports.size());
  st::reduce_plan const plan(g.capacity);
  std::vector<std::int64_t> out(plan.max_words(), std::numeric_limits<std::int64_t>::min());
  for (int r = 0; r < size; ++r) {
    std::vector<std::int64_t> words(plan.max_words());
    sd::pack_max(g.reports[static_cast<std::size_t>(r)], g.writers[static_cast<std::size_t>(r)], true, words);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::max(out[i], words[i]);
  }
  int failed = 0;
  for (int r = 0; r < size; ++r) {
    auto const& mine = g.reports[static_cast<std::size_t>(r)];
    try {
      int const w = sd::check_max_header(mine, std::span<std::int64_t const>(out), plan.capacity(), r, size, "fuzz");
      FUZZ_CHECK(w == g.writers[0]);
      auto const result = sd::unpack_max(mine, std::span<std::int64_t const>(out));
      FUZZ_CHECK(result.size() == mine.size());
      for (std::size_t i = 0; i < mine.size(); ++i) FUZZ_CHECK(bitwise_equal(result.values()[i], reference_max(g.reports, i)) || (result.values()[i].index() == 1 && std::isnan(std::get<1>(result.values()[i])) && std::isnan(std::get<1>(reference_max(g.reports, i)))));
    } catch (headroom::error const&) {
      ++failed;
    }
  }
  FUZZ_CHECK(failed == 0 || failed == size);
  FUZZ_CHECK((failed == 0) == g.agree);
}

void simulate_gather(group_case const& g) {
  int const size = static_cast<int>(g.reports.size());
  st::reduce_plan const plan(g.capacity);
  std::size_t const per_rank = plan.gather_words_per_rank();
  std::vector<std::int64_t> all(plan.gather_words(size));
  for (int r = 0; r < size; ++r)
    sd::pack_gather(g.reports[static_cast<std::size_t>(r)], g.writers[static_cast<std::size_t>(r)],
                    std::span<std::int64_t>(all).subspan(static_cast<std::size_t>(r) * per_rank, per_rank));
  int failed = 0;
  for (int r = 0; r < size; ++r) {
    auto const& mine = g.reports[static_cast<std::size_t>(r)];
    try {
      (void)sd::check_gather_headers(mine, std::span<std::int64_t const>(all), per_rank, plan.capacity(), r, size, "fuzz");
      auto const table = sd::unpack_gather(mine, std::span<std::int64_t const>(all), per_rank, size, true);
      FUZZ_CHECK(table.ranks() == size && table.size() == mine.size());
      for (std::size_t i = 0; i < table.size(); ++i) {
        auto const& row = table.rows()[i];
        for (int q = 0; q < size; ++q)
          FUZZ_CHECK(bitwise_equal(row.per_rank[static_cast<std::size_t>(q)], g.reports[static_cast<std::size_t>(q)].values()[i]));
        FUZZ_CHECK(bitwise_equal(row.max, row.per_rank[static_cast<std::size_t>(row.argmax)]));
        FUZZ_CHECK(bitwise_equal(row.min, row.per_rank[static_cast<std::size_t>(row.argmin)]));
        auto const ref = reference_max(g.reports, i);
        bool const nan_max = row.max.index() == 1 && std::isnan(std::get<1>(row.max));
        FUZZ_CHECK(nan_max ? (ref.index() == 1 && std::isnan(std::get<1>(ref))) : bitwise_equal(row.max, ref));
        // Lowest rank on ties.
        for (int q = 0; q < row.argmax; ++q)
          FUZZ_CHECK(!bitwise_equal(row.per_rank[static_cast<std::size_t>(q)], row.max) || nan_max);
        if (!nan_max && row.min.index() == row.max.index()) {
          double const lo = st::to_double(row.min), hi = st::to_double(row.max);
          if (!std::isnan(lo) && std::isfinite(row.mean)) FUZZ_CHECK(row.mean >= lo && row.mean <= hi);
        }
      }
    } catch (headroom::error const&) {
      ++failed;
    }
  }
  FUZZ_CHECK(failed == 0 || failed == size);
  FUZZ_CHECK((failed == 0) == g.agree);
}

// Arbitrary words as a reduced header: only headroom errors or a verdict.
void arbitrary_words(fuzz::input& in, st::dynamic_report const& mine) {
  st::reduce_plan const plan(6);
  std::vector<std::int64_t> words(plan.gather_words(3));
  for (auto& w : words) w = in.in<int>(0, 3) == 0 ? in.in<std::int64_t>(-2, 8) : in.take<std::int64_t>();
  try {
    (void)sd::check_max_header(mine, std::span<std::int64_t const>(words).first(plan.max_words()), plan.capacity(), 0, 3, "fuzz");
    (void)sd::unpack_max(mine, std::span<std::int64_t const>(words).first(plan.max_words()));
  } catch (headroom::error const&) {
  }
  try {
    (void)sd::check_gather_headers(mine, std::span<std::int64_t const>(words), plan.gather_words_per_rank(), plan.capacity(), 0, 3, "fuzz");
    (void)sd::unpack_gather(mine, std::span<std::int64_t const>(words), plan.gather_words_per_rank(), 3, in.flag());
  } catch (headroom::error const&) {
  }
}

// The real reducer on a thread group: the same verdict on every rank, the simulated values.
void real_group(group_case const& g) {
  int const size = static_cast<int>(g.reports.size());
  if (size != 1 && size != 3) return;
  std::vector<std::optional<st::dynamic_report>> results(static_cast<std::size_t>(size));
  std::vector<char> threw(static_cast<std::size_t>(size), 0);
  headroom::host::launch(size, [&](headroom::host::thread_communicator& comm) {
    auto const r = static_cast<std::size_t>(comm.rank());
    st::reducer<> red{st::reduce_plan(g.capacity)};
    try {
      results[r] = red.max(g.reports[r], comm);
    } catch (headroom::error const&) {
      threw[r] = 1;
    }
    comm.barrier();  // the group is still usable after a refused reduction
  });
  FUZZ_CHECK(std::all_of(threw.begin(), threw.end(), [&](char t) { return t == threw[0]; }));
  if (!threw[0])
    for (auto const& res : results)
      for (std::size_t i = 0; i < res->size(); ++i) {
        auto const ref = reference_max(g.reports, i);
        auto const& v = res->values()[i];
        FUZZ_CHECK(bitwise_equal(v, ref) || (v.index() == 1 && std::isnan(std::get<1>(v)) && std::isnan(std::get<1>(ref))));
      }
  // reducer::max names no writer; one rank checks only the capacity.
  bool const fits = g.reports[0].size() <= g.capacity;
  FUZZ_CHECK(static_cast<bool>(threw[0]) != (size == 1 ? fits : g.same_schema));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
  fuzz::input in(data, size);
  switch (in.in<int>(0, 3)) {
    case 0: check_order_keys(in); break;
    case 1: arbitrary_words(in, draw_report(in, in.in<std::size_t>(0, 6))); break;
    default: {
      auto const g = draw_group(in);
      simulate_max(g);
      simulate_gather(g);
      if (in.in<int>(0, 7) == 0) real_group(g);
      break;
    }
  }
  return 0;
}
