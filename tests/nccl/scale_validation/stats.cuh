// SPDX-License-Identifier: Apache-2.0
#pragma once
// Scale validation [stats]: reducer max and gather over pipeline groups, exact checks and latency.
// Part of tests/nccl/scale_validation.cu (one program; this folder is not globbed as programs).
#include "headroom/stats/cuda/staging.hpp"
#include "headroom/stats.hpp"

#include "shared_state.cuh"

namespace scale_validation {

namespace hs = headroom::stats;

/// Rank q's report of `keys` keys in group `group` for `trial`: every rank can rebuild every
/// peer's. Even keys int64, odd keys double; awkward values and ties on purpose.
hs::dynamic_report stats_report(u64 seed, int group_size, int group, std::size_t keys, int trial, int q) {
  hs::dynamic_report rep;
  for (std::size_t i = 0; i < keys; ++i) {
    std::string const name = "memory/key." + std::to_string(i);
    bool const tie = i % 8 == 3;  // every rank reports the same value: argmax / argmin go to rank 0
    u64 const h = mix64(seed ^ mix64(static_cast<u64>(group_size) << 48 ^ static_cast<u64>(group) << 40 ^
                                     static_cast<u64>(trial) << 32 ^ static_cast<u64>(i) << 8 ^ (tie ? 0xFFull : static_cast<u64>(q))));
    int const pick = static_cast<int>(h % 10);
    if (i % 2 == 0) {
      std::int64_t v = 0;
      switch (pick) {
        case 0: v = std::numeric_limits<std::int64_t>::max() - static_cast<std::int64_t>(h >> 60); break;
        case 1: v = std::numeric_limits<std::int64_t>::min() + static_cast<std::int64_t>(h >> 60); break;
        case 2: v = (std::int64_t{1} << 53) + static_cast<std::int64_t>(h >> 59); break;  // doubles would round these
        case 3: v = -static_cast<std::int64_t>(h >> 40); break;
        default: v = static_cast<std::int64_t>(h >> 1); break;
      }
      rep.set(name, v);
    } else {
      double v = 0;
      switch (pick) {
        case 0: v = std::numeric_limits<double>::infinity(); break;
        case 1: v = -std::numeric_limits<double>::infinity(); break;
        case 2: v = -0.0; break;
        case 3: v = 0.0; break;
        case 4: v = std::numeric_limits<double>::denorm_min(); break;
        default: v = std::ldexp(static_cast<double>(static_cast<std::int64_t>(h)), -static_cast<int>(h % 80)); break;
      }
      rep.set(name, v);
    }
  }
  return rep;
}

/// Expected gather summary: max / min / argmax / argmin under the total order (ties to the
/// lowest rank), and the mean as the reducer computes it (long double sum in rank order).
struct expected_summary {
  std::vector<hs::value> max, min;
  std::vector<int> argmax, argmin;
  std::vector<double> mean;
};
bool value_less(hs::value const& a, hs::value const& b);
expected_summary expected_of(std::vector<hs::dynamic_report> const& all) {
  std::size_t const keys = all.at(0).size();
  int const g = static_cast<int>(all.size());
  expected_summary e{std::vector<hs::value>(keys), std::vector<hs::value>(keys), std::vector<int>(keys, 0),
                     std::vector<int>(keys, 0), std::vector<double>(keys)};
  for (std::size_t i = 0; i < keys; ++i) {
    e.max[i] = e.min[i] = all[0][i].value;
    long double sum = 0;
    for (int k = 0; k < g; ++k) {
      auto const& v = all[static_cast<std::size_t>(k)][i].value;
      if (value_less(e.max[i], v)) e.max[i] = v, e.argmax[i] = k;
      if (value_less(v, e.min[i])) e.min[i] = v, e.argmin[i] = k;
      sum += hs::to_double(v);
    }
    e.mean[i] = static_cast<double>(sum / static_cast<long double>(g));
  }
  return e;
}

/// IEEE total order without NaN: -0.0 < +0.0.
bool value_less(hs::value const& a, hs::value const& b) {
  if (a.index() == 0) return std::get<0>(a) < std::get<0>(b);
  double const x = std::get<1>(a), y = std::get<1>(b);
  if (x == y) return std::signbit(x) && !std::signbit(y);
  return x < y;
}
bool value_same(hs::value const& a, hs::value const& b) {
  if (a.index() != b.index()) return false;
  if (a.index() == 0) return std::get<0>(a) == std::get<0>(b);
  return std::bit_cast<u64>(std::get<1>(a)) == std::bit_cast<u64>(std::get<1>(b));
}

using staging = hs::cuda::blocking_device_staging;

void stats_section(shared_state& st, nccl::communicator& world, hc::stream_view s) {
  int const n = world.size();
  int const r = world.rank();
  std::vector<int> sizes{2};
  if (n >= 4) sizes.push_back(4);
  else st.skip(r, "stats: PP group of 4 (needs 4 GPUs)");
  if (n >= 8) sizes.push_back(8);
  else st.skip(r, "stats: PP group of 8 (needs 8 GPUs)");

  constexpr std::array<std::size_t, 3> key_counts{8, 64, 512};

  // Setup phase: every group size's communicator (collective over the world: every rank calls
  // every split) and every buffer, once, sized for the largest (group size, key count). These
  // were made and freed per (group size, key count) before: cudaMalloc / cudaMallocHost and
  // cudaFree / cudaFreeHost between one rank's collectives while a peer's NCCL kernel waited
  // for that rank hung the first 2-GPU run.
  quiesce(st, r, "stats: setup", s);
  std::vector<nccl::communicator> groups_of(sizes.size());
  std::size_t ws_max = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    int const g = sizes[i];
    bool const member = r < n / g * g;
    st.wd.phase(r, headroom::detail::concat("stats: setup, split for PP group of ", g));
    groups_of[i] = world.split(member ? r / g : nccl::communicator::no_color, r);
    for (std::size_t keys : key_counts) ws_max = std::max(ws_max, staging::workspace_bytes(hs::reduce_plan(keys), g));
  }
  tracked watched(st.wd);  // after the communicators: leaves the watchdog's list before they die
  for (auto& c : groups_of) watched.add(c);
  std::size_t const max_keys = key_counts.back();
  hs::workspace<hc::device_resource, hc::stream_view> dev(hc::device_resource{}, s, ws_max);
  hs::workspace<hc::pinned_resource, hc::stream_view> pinned(hc::pinned_resource{}, s, ws_max);
  hs::workspace<hc::pinned_resource, hc::stream_view> host_words(hc::pinned_resource{}, s, 2 * max_keys * sizeof(std::int64_t));
  scratch_arena arena(scratch_arena::footprint({2 * max_keys * sizeof(std::int64_t), sizeof(std::uint32_t)}), "stats");
  use_arena use(arena);
  dbuf<std::int64_t> d(2 * max_keys);
  device_barrier const bar(s);
  quiesce(st, r, "stats: setup done", s);

  collective_phase(st, [&] {
    for (std::size_t gi = 0; gi < sizes.size(); ++gi) {
      int const g = sizes[gi];
      int const groups = n / g;
      bool const member = r < groups * g;
      int const group = r / g;
      if (!member) continue;
      nccl::communicator& pp = groups_of[gi];
      int const q = pp.rank();
      std::string const tag = headroom::detail::concat("PP group of ", g);
      st.checks.record("stats", tag + ": split group has the expected size and rank", pp.size() == g && q == r % g, r,
                       headroom::detail::concat("got ", q, "/", pp.size()));
      for (std::size_t keys : key_counts) {
        hs::reduce_plan const plan(keys);
        std::size_t const ws_bytes = staging::workspace_bytes(plan, g);
        // This case's share of the buffers made in the setup phase (no allocation here).
        hs::reducer<staging> reduce(plan, staging(dev.bytes().first(ws_bytes), pinned.bytes().first(ws_bytes)));
        std::string const kt = headroom::detail::concat(tag, ", ", keys, " keys");
        st.wd.phase(r, "stats: " + kt);
        auto poison = [&] {
          HEADROOM_CUDA_TRY(cudaMemsetAsync(dev.data(), 0xA5, ws_bytes, s.get()));
          s.synchronize();
        };
        for (int trial = 0; trial < 3; ++trial) {
          std::vector<hs::dynamic_report> all;
          for (int k = 0; k < g; ++k) all.push_back(stats_report(st.opt.seed, g, group, keys, trial, k));
          hs::dynamic_report const mine = all[static_cast<std::size_t>(q)];
          hs::dynamic_report const before = mine;
          auto const e = expected_of(all);
          auto const& emax = e.max;
          auto const& emin = e.min;
          auto const& eargmax = e.argmax;
          auto const& eargmin = e.argmin;
          auto const& emean = e.mean;
          hs::dynamic_report const expect = mine.with_values(emax);
          std::string const td = headroom::detail::concat("trial ", trial, ", seed ", st.opt.seed);

          poison();
          auto const got = reduce.max(mine, pp, s);
          std::string why;
          if (!(got == expect))
            for (std::size_t i = 0; i < keys && why.empty(); ++i)
              if (!value_same(got[i].value, emax[i])) {
                std::ostringstream os;
                os << td << ": key " << got[i].name << " got ";
                hs::print_value(os, got[i].value) << ", expected ";
                hs::print_value(os, emax[i]);
                why = os.str();
              }
          st.checks.record("stats", kt + ": reducer::max == per-key max over the group (bitwise)", got == expect, r,
                           why.empty() ? td : why);
          st.checks.record("stats", kt + ": reducer::max leaves its input unchanged", mine == before, r, td);

          poison();
          auto const table = reduce.gather(mine, pp, s);
          bool ok = table.ranks() == g && table.size() == keys;
          std::string gwhy = ok ? std::string{} : headroom::detail::concat("table of ", table.ranks(), " ranks, ", table.size(), " keys");
          for (std::size_t i = 0; i < keys && ok; ++i) {
            auto const& row = table.rows()[i];
            bool per_rank = row.per_rank.size() == static_cast<std::size_t>(g);
            for (int k = 0; k < g && per_rank; ++k)
              per_rank = value_same(row.per_rank[static_cast<std::size_t>(k)], all[static_cast<std::size_t>(k)][i].value);
            bool const mean_ok = std::bit_cast<u64>(row.mean) == std::bit_cast<u64>(emean[i]) ||
                                 (std::isnan(row.mean) && std::isnan(emean[i]));
            ok = row.name == all[0][i].name && per_rank && value_same(row.max, emax[i]) && value_same(row.min, emin[i]) &&
                 row.argmax == eargmax[i] && row.argmin == eargmin[i] && mean_ok;
            if (!ok)
              gwhy = headroom::detail::concat(td, ": key ", row.name, " argmax ", row.argmax, " (expected ", eargmax[i], "), argmin ",
                                              row.argmin, " (expected ", eargmin[i], "), per-rank values ",
                                              per_rank ? "equal" : "differ", ", mean ", row.mean, " (expected ", emean[i], ")");
          }
          st.checks.record("stats", kt + ": reducer::gather table == every rank's values, max/argmax/min/argmin/mean (exact)", ok,
                           r, gwhy);
        }

        // Latency: the reducer beside a bare ncclAllReduce of keys x int64 on the same group.
        hs::dynamic_report const mine = stats_report(st.opt.seed, g, group, keys, 0, q);
        st.wd.phase(r, "stats: " + kt + ", latency");
        auto* h = static_cast<std::int64_t*>(host_words.data());
        for (std::size_t i = 0; i < 2 * keys; ++i) h[i] = static_cast<std::int64_t>(i) * (q + 1);
        std::size_t const bytes = keys * sizeof(std::int64_t);
        ncclComm_t const raw = pp.get();
        auto nccl_device = [&] {
          HEADROOM_NCCL_TRY(ncclAllReduce(d.data(), d.data() + keys, keys, ncclInt64, ncclMax, raw, s.get()));
          s.synchronize();
        };
        auto nccl_staged = [&] {
          HEADROOM_CUDA_TRY(cudaMemcpyAsync(d.data(), h, bytes, cudaMemcpyHostToDevice, s.get()));
          HEADROOM_NCCL_TRY(ncclAllReduce(d.data(), d.data() + keys, keys, ncclInt64, ncclMax, raw, s.get()));
          HEADROOM_CUDA_TRY(cudaMemcpyAsync(h + keys, d.data() + keys, bytes, cudaMemcpyDeviceToHost, s.get()));
          s.synchronize();
        };
        hs::dynamic_report sink;
        hs::rank_table tsink;
        auto do_max = [&] { sink = reduce.max(mine, pp, s); };
        auto do_gather = [&] { tsink = reduce.gather(mine, pp, s); };
        struct timing {
          double wall = 0, event = 0;
        };
        auto measure = [&](std::function<void()> const& op) {
          hc::event a(hc::event_options{.timing = true}), b(hc::event_options{.timing = true});
          for (int i = 0; i < st.opt.lat_warmup; ++i) op();
          bar(pp, s);
          s.synchronize();
          std::vector<double> wall, ev;
          for (int i = 0; i < st.opt.lat_iterations; ++i) {
            a.record(s);
            auto const t0 = std::chrono::steady_clock::now();
            op();
            auto const t1 = std::chrono::steady_clock::now();
            b.record(s);
            b.synchronize();
            wall.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            ev.push_back(1000.0 * elapsed_ms(a, b));
          }
          return timing{median(wall), median(ev)};
        };
        timing const t_dev = measure(nccl_device), t_staged = measure(nccl_staged), t_max = measure(do_max),
                     t_gather = measure(do_gather);
        bool staged_ok = true;
        for (std::size_t i = 0; i < keys; ++i) staged_ok = staged_ok && h[keys + i] == static_cast<std::int64_t>(i) * g;
        st.checks.record("stats", kt + ": bare ncclAllReduce(max) peer gives the expected max", staged_ok, r);
        std::vector<hs::dynamic_report> all0;
        for (int k = 0; k < g; ++k) all0.push_back(stats_report(st.opt.seed, g, group, keys, 0, k));
        st.checks.record("stats", kt + ": reducer::max and gather still exact after the timed calls",
                         sink == mine.with_values(expected_of(all0).max) && tsink.size() == keys && tsink.ranks() == g, r);
        if (r == 0) {
          std::lock_guard lock(st.m);
          st.lat.push_back({g, keys, t_max.wall, t_max.event, t_gather.wall, t_dev.wall, t_staged.wall});
        }
      }
    }
  });
  // Teardown phase: buffers and communicators die at return, every rank past its last collective.
  quiesce(st, r, "stats: teardown", s);
}

void print_stats_table(shared_state& st) {
  std::lock_guard lock(st.m);
  std::printf("\n[stats] latency on world rank 0's group, median microseconds over %d calls after %d warm-up (host wall clock;\n",
              st.opt.lat_iterations, st.opt.lat_warmup);
  std::printf("        nccl_staged = H2D + ncclAllReduce(max) of keys x int64 + D2H + sync, pinned; nccl_device = the collective alone)\n");
  std::printf("%5s %5s %8s | %10s %10s %11s %12s %11s | %9s %9s\n", "group", "keys", "bytes", "max", "max(event)", "gather",
              "nccl_staged", "nccl_device", "max/stag", "max/dev");
  for (auto const& l : st.lat)
    std::printf("%5d %5zu %8zu | %10.1f %10.1f %11.1f %12.1f %11.1f | %9.3f %9.3f\n", l.group, l.keys, l.keys * 8, l.max_wall,
                l.max_event, l.gather_wall, l.nccl_staged_wall, l.nccl_device_wall,
                l.nccl_staged_wall > 0 ? l.max_wall / l.nccl_staged_wall : 0.0,
                l.nccl_device_wall > 0 ? l.max_wall / l.nccl_device_wall : 0.0);
  std::fflush(stdout);
}

}  // namespace scale_validation
