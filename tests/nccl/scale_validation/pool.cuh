// SPDX-License-Identifier: Apache-2.0
#pragma once
// Scale validation [pool]: max-pool plan of a hybrid model on an NCCL-registered arena, strict assignment.
// Part of tests/nccl/scale_validation.cu (one program; this folder is not globbed as programs).
#include "headroom/pool/cuda/nccl.hpp"
#include "headroom/pool/cuda/unit_pool.hpp"
#include "headroom/pool/models.hpp"
#include "headroom/pool/plan.hpp"

#include "shared_state.cuh"

namespace scale_validation {

__host__ __device__ inline u64 shard_key(u64 base, int rank) { return mix64(base ^ (static_cast<u64>(rank) + 1) * 0xD1B54A32D192ED03ull); }
__host__ __device__ inline std::uint32_t shard_word(u64 key, u64 i) {
  return static_cast<std::uint32_t>(mix64(key + i * 0x9E3779B97F4A7C15ull));
}
u64 unit_key(u64 seed, int step, std::size_t unit, std::size_t bucket) {
  return mix64(seed ^ mix64(static_cast<u64>(step) << 40 ^ static_cast<u64>(unit) << 8 ^ static_cast<u64>(bucket)));
}

__global__ void fill_shard_kernel(std::uint32_t* shard, u64 words, u64 key) {
  for (u64 i = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x; i < words; i += static_cast<u64>(gridDim.x) * blockDim.x)
    shard[i] = shard_word(key, i);
}
/// Counts words of the gathered slot that differ from the rank-major concatenation of shards.
__global__ void verify_gathered_kernel(std::uint32_t const* slot, u64 shard_words, int ranks, u64 base,
                                       unsigned long long* bad) {
  unsigned long long mine = 0;
  for (int r = 0; r < ranks; ++r) {
    u64 const key = shard_key(base, r);
    std::uint32_t const* part = slot + static_cast<u64>(r) * shard_words;
    for (u64 i = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x; i < shard_words; i += static_cast<u64>(gridDim.x) * blockDim.x)
      mine += part[i] != shard_word(key, i);
  }
  if (mine != 0) atomicAdd(bad, mine);
}

void pool_section(shared_state& st, nccl::communicator& world, hc::stream_view s) {
  int const n = world.size();
  int const r = world.rank();
  using namespace headroom::pool;
  // A real hybrid workload: Nemotron-3-Nano-30B-A3B at expert parallel 8 (52 units of 3 kinds).
  auto const cfg = models::nemotron_3_nano_30b_a3b();
  workload const w = models::make_workload(cfg, {.expert_parallel = 8});
  // Pad each bucket to whole shards of 64 elements per rank, so that it all-gathers evenly.
  auto const plan = make_plan<pool::max>(w, {.buffers = 2}, pad_elements{static_cast<u64>(n) * 64});
  std::size_t const units = plan.unit_count();
  std::size_t max_buckets = 0;
  for (auto const& b : plan.bucket_bytes) max_buckets = std::max(max_buckets, b.size());
  std::vector<std::size_t> shard_words(max_buckets, 0);
  u64 per_step = 0;
  for (std::size_t u = 0; u < units; ++u)
    for (std::size_t b = 0; b < plan.bucket_bytes[u].size(); ++b) {
      u64 const bytes = plan.bucket_bytes[u][b];
      expects<logic_error>(bytes % (4ull * static_cast<u64>(n)) == 0, "pool: bucket of ", bytes, " bytes does not split into uint32 shards");
      shard_words[b] = std::max<std::size_t>(shard_words[b], static_cast<std::size_t>(bytes / 4 / static_cast<u64>(n)));
      per_step += bytes;
    }
  // The pool below keeps NonUnit = dynamic, whose acquire / release would call the upstream
  // (ncclMemAlloc / ncclMemFree: synchronising) between all-gathers for a unit the plan leaves
  // out. The max plan pools every unit, and non-unit buckets are never acquired here.
  expects<logic_error>(plan.pooled_units() == units, "pool: the max plan pools ", plan.pooled_units(), " of ", units,
                       " units; the others would allocate at acquire, between collectives");

  // Setup phase: streams, events, the shards and counters (one arena), the nccl_mem_resource
  // pool, all before the first collective.
  quiesce(st, r, "pool: setup", s);
  hc::stream home, ag, compute;
  hc::event gathered;
  std::atomic<u64> logged_moves{0};
  std::size_t arena_bytes = scratch_arena::footprint({2 * sizeof(i64), units * max_buckets * sizeof(unsigned long long)});
  for (auto words : shard_words) arena_bytes += scratch_arena::footprint({words * sizeof(std::uint32_t)});
  scratch_arena arena(arena_bytes, "pool");
  use_arena use(arena);
  dbuf<i64> f(2);
  std::vector<dbuf<std::uint32_t>> shards;
  shards.reserve(max_buckets);
  for (auto words : shard_words) shards.emplace_back(words);
  dbuf<unsigned long long> bad(units * max_buckets);
  pool_result res;
  res.workload = w.name;
  res.arena_bytes = plan.arena_bytes;
  res.units = units;
  res.slots = plan.slots.size();
  res.shapes = plan.shapes.size();
  res.gathered_bytes_per_step = per_step;
  {
    cuda_unit_pool<nccl::nccl_mem_resource, strict> pool(plan, {}, home.view(),
                                                         strict([&](move_event const&) { logged_moves.fetch_add(1); }));
    HEADROOM_CUDA_TRY(cudaMemsetAsync(pool.arena(), 0xFF, pool.arena_bytes(), home.get()));
    home.synchronize();
    quiesce(st, r, "pool: setup done", s);

    collective_phase(st, [&] {
      // Plans are deterministic: every rank must hold the same slots at the same offsets.
      u64 fp = mix64(plan.arena_bytes);
      for (auto const& sl : plan.slots) fp = mix64(fp ^ mix64(sl.offset * 31 + sl.bytes));
      i64 const h = static_cast<i64>(fp >> 2);
      f.upload({h, -h}, s);
      world.all_reduce(std::span<i64 const>(f.data(), 2), std::span<i64>(f.data(), 2), reduce_op::max, s);
      auto const got = f.download(s);
      st.checks.record("pool", "the plan is the same on every rank (fingerprint max == min over the world)",
                       got[0] == h && got[1] == -h, r);
    });
    // ncclCommRegister can synchronise: between host barriers, with no collective in flight.
    quiesce(st, r, "pool: before the first registration", s);
    st.wd.phase(r, "pool: first ncclCommRegister");
    auto t0 = std::chrono::steady_clock::now();
    nccl::registration reg = register_arena(world, pool);  // once, for every slot of every unit
    res.reg_first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    st.checks.record("pool", "arena registered once with the N-rank world communicator (covers the whole arena)",
                     reg.active() && reg.size() == pool.arena_bytes() && reg.data() == pool.arena(), r);
    quiesce(st, r, "pool: registered", s);

    std::vector<std::vector<std::byte*>> first_addresses(units);
    collective_phase(st, [&] {
      for (int step = 0; step < st.opt.steps; ++step) {
        bool const backward = step % 2 == 1;
        bad.poison(s, 0);
        quiesce(st, r, headroom::detail::concat("pool: before step ", step), {s, ag.view(), compute.view()});
        st.wd.phase(r, headroom::detail::concat("pool: step ", step));
        auto const start = std::chrono::steady_clock::now();
        std::vector<std::vector<std::byte*>> addresses(units);
        using lease_t = decltype(pool)::lease;
        std::vector<lease_t> held(units);
        auto unit_at = [&](std::size_t i) { return backward ? units - 1 - i : i; };
        auto gather = [&](std::size_t u) {
          held[u] = pool.acquire(u, ag.view());
          for (std::size_t b = 0; b < held[u].size(); ++b) {
            auto const slot = held[u].view<std::uint32_t>(b);
            std::size_t const words = slot.size() / static_cast<std::size_t>(n);
            HEADROOM_CUDA_TRY(cudaMemsetAsync(slot.data(), 0xFF, slot.size_bytes(), ag.get()));  // poison
            fill_shard_kernel<<<264, 256, 0, ag.get()>>>(shards[b].data(), words, shard_key(unit_key(st.opt.seed, step, u, b), r));
            HEADROOM_CUDA_CHECK_LAST();
            world.all_gather(std::span<std::uint32_t const>(shards[b].data(), words), slot, ag.view());
          }
        };
        gather(unit_at(0));
        for (std::size_t i = 0; i < units; ++i) {
          std::size_t const u = unit_at(i);
          gathered.record(ag.view());
          gathered.wait_on(compute.view());
          if (i + 1 < units) gather(unit_at(i + 1));  // prefetch the next unit while this one is consumed
          for (std::size_t b = 0; b < held[u].size(); ++b) {
            auto const slot = held[u].view<std::uint32_t>(b);
            addresses[u].push_back(held[u].bytes(b).data());
            verify_gathered_kernel<<<264, 256, 0, compute.get()>>>(slot.data(), slot.size() / static_cast<std::size_t>(n), n,
                                                                    unit_key(st.opt.seed, step, u, b), bad.data() + u * max_buckets + b);
            HEADROOM_CUDA_CHECK_LAST();
          }
          pool.release(held[u], compute.view());
        }
        compute.synchronize();
        ag.synchronize();
        res.step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        auto const counts = bad.download(s);
        u64 wrong = 0;
        std::size_t first_bad = units;
        for (std::size_t u = 0; u < units; ++u)
          for (std::size_t b = 0; b < max_buckets; ++b)
            if (counts[u * max_buckets + b] != 0) {
              wrong += counts[u * max_buckets + b];
              if (first_bad == units) first_bad = u;
            }
        st.checks.record("pool", headroom::detail::concat("step ", step, backward ? " (backward order)" : " (forward order)",
                                                          ": all-gathers into leased slots == concatenation of every rank's shard"),
                         wrong == 0, r,
                         headroom::detail::concat(wrong, " wrong words, first in unit ", first_bad, first_bad < units ? plan.unit_names[first_bad] : ""));
        bool inside = true;
        for (auto const& a : addresses)
          for (auto* p : a) inside = inside && p >= pool.arena() && p < pool.arena() + pool.arena_bytes();
        st.checks.record("pool", headroom::detail::concat("step ", step, ": every leased slot lies in the registered arena"), inside, r);
        if (step == 0) {
          first_addresses = addresses;
        } else {
          std::size_t moved = 0;
          for (std::size_t u = 0; u < units; ++u) moved += addresses[u] != first_addresses[u];
          st.checks.record("pool", headroom::detail::concat("step ", step, ": strict assignment, every unit at the same addresses as in step 0"),
                           moved == 0, r, headroom::detail::concat(moved, " units changed address"));
        }
        st.checks.record("pool", headroom::detail::concat("step ", step, ": all slots released at the end of the pass"),
                         pool.stats().slots_in_use == 0, r, headroom::detail::concat(pool.stats().slots_in_use, " in use"));
      }
    });
    res.moves = pool.stats().moves;
    res.cross_stream_waits = pool.stats().cross_stream_waits;
    st.checks.record("pool", "strict assignment: no bucket moved (pool stats and logger)", res.moves == 0 && logged_moves.load() == 0, r,
                     headroom::detail::concat(res.moves, " moves, ", logged_moves.load(), " logged"));
    st.checks.record("pool", "prefetching ordered slot reuse across streams (cross-stream waits > 0)", res.cross_stream_waits > 0, r);
    st.checks.record("pool", "peak slots in use <= the plan's slots", pool.stats().slots_in_use_peak <= pool.stats().slots_total, r);

    // Registration cost: deregister, then rounds of register / deregister, each round between
    // host barriers (ncclCommRegister / ncclCommDeregister can synchronise; no collective runs
    // in these rounds).
    quiesce(st, r, "pool: registration rounds", {s, ag.view(), compute.view()});
    st.wd.phase(r, "pool: registration rounds");
    reg.reset();
    std::vector<double> regs, deregs;
    for (int k = 0; k < st.opt.reg_rounds; ++k) {
      quiesce(st, r, headroom::detail::concat("pool: registration round ", k), s);
      auto const a = std::chrono::steady_clock::now();
      reg = register_arena(world, pool);
      auto const b = std::chrono::steady_clock::now();
      reg.reset();
      auto const c = std::chrono::steady_clock::now();
      regs.push_back(std::chrono::duration<double, std::milli>(b - a).count());
      deregs.push_back(std::chrono::duration<double, std::milli>(c - b).count());
    }
    res.reg_median_ms = median(regs);
    res.dereg_median_ms = median(deregs);
    quiesce(st, r, "pool: ncclMemAlloc pool teardown", s);  // then ncclMemFree of the arena
  }
  {
    // Peer: a cudaMalloc arena of the same size, registered the same way.
    quiesce(st, r, "pool: cudaMalloc pool setup", s);
    cuda_unit_pool<hc::device_resource, strict> pool(plan, {}, home.view());
    std::vector<double> regs;
    double first = 0;
    for (int k = 0; k <= st.opt.reg_rounds; ++k) {
      quiesce(st, r, headroom::detail::concat("pool: cudaMalloc arena registration round ", k), s);
      auto const a = std::chrono::steady_clock::now();
      nccl::registration reg = register_arena(world, pool);
      double const ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
      if (k == 0) first = ms;  // the first registration of this arena, alone
      else regs.push_back(ms);
      reg.reset();
    }
    res.malloc_reg_first_ms = first;
    res.malloc_reg_median_ms = median(regs);
    quiesce(st, r, "pool: cudaMalloc pool teardown", s);  // then cudaFree of the arena
  }
  if (r == 0) {
    std::lock_guard lock(st.m);
    st.pool = res;
  }
}

void print_pool_table(shared_state& st) {
  std::lock_guard lock(st.m);
  auto const& p = st.pool;
  std::printf("\n[pool] %s: max plan, 2 buffers, %zu units, %zu shapes, %zu slots, arena %.1f MiB; %.2f GiB all-gathered per step per rank\n",
              p.workload.c_str(), p.units, p.shapes, p.slots, static_cast<double>(p.arena_bytes) / (1 << 20),
              static_cast<double>(p.gathered_bytes_per_step) / (1ull << 30));
  std::printf("%-44s %12s\n", "registration on the world communicator (rank 0)", "ms");
  std::printf("%-44s %12.3f\n", "ncclMemAlloc arena: first ncclCommRegister", p.reg_first_ms);
  std::printf("%-44s %12.3f\n", "ncclMemAlloc arena: register, median", p.reg_median_ms);
  std::printf("%-44s %12.3f\n", "ncclMemAlloc arena: deregister, median", p.dereg_median_ms);
  std::printf("%-44s %12.3f\n", "cudaMalloc arena: first ncclCommRegister", p.malloc_reg_first_ms);
  std::printf("%-44s %12.3f\n", "cudaMalloc arena: register, median", p.malloc_reg_median_ms);
  std::printf("%-6s %12s %10s\n", "step", "wall ms", "GB/s out");
  for (std::size_t i = 0; i < p.step_ms.size(); ++i)
    std::printf("%-6zu %12.2f %10.0f\n", i, p.step_ms[i],
                p.step_ms[i] > 0 ? static_cast<double>(p.gathered_bytes_per_step) / (p.step_ms[i] * 1e-3) / 1e9 : 0.0);
  std::printf("moves %llu, cross-stream waits %llu\n", static_cast<unsigned long long>(p.moves),
              static_cast<unsigned long long>(p.cross_stream_waits));
  std::fflush(stdout);
}

}  // namespace scale_validation
