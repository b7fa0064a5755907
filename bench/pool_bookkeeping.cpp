// SPDX-License-Identifier: Apache-2.0
// The unit pool's own host cost per acquire + release pair, with the stream-ordering calls taken
// out: the same training-step trace as bench_pool_acquire (forward then backward, one unit
// prefetched), on streams that have an identity (so two streams make the pool track and wait)
// and events whose record / wait do nothing. What bench_pool_acquire measures above the bare
// cudaEventRecord / cudaStreamWaitEvent floor should match this, unless the CUDA calls themselves
// cost more inside the pool than in the floor loop. Pure host: runs on any CPU.
//
// With an eviction size, each record and wait instead sweeps a buffer of that many KiB (as the
// driver's own code and data do between two pool steps), and the table gives the pool's time
// minus the same sweeps alone. Under cachegrind, the difference of two run lengths gives the
// pool's D1 misses per pair with its lines evicted at every driver call (docs/pool.md):
//   valgrind --tool=cachegrind --cache-sim=yes --D1=49152,12,64 bench_pool_bookkeeping 3 64
//
//   bench_pool_bookkeeping [reps] [evict KiB]     table, then one JSON line
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "headroom/pool/models.hpp"
#include "headroom/pool/plan.hpp"
#include "headroom/pool/unit_pool.hpp"

namespace hp = headroom::pool;

// A named namespace: the equality the concepts require is never called, and clang warns about
// unused internal functions.
namespace pool_bookkeeping {

struct id_stream {
  int id = 0;
  void synchronize() const noexcept {}
  friend bool operator==(id_stream, id_stream) = default;
};

// Record and wait touch a volatile, so the calls are not optimised away, and sweep the eviction
// buffer when there is one (one read and write per cache line).
inline volatile unsigned long long touched = 0;
inline std::vector<unsigned long long> evict_buffer;
[[gnu::noinline]] inline void driver_call(int id) {
  unsigned long long sum = static_cast<unsigned>(id);
  for (std::size_t i = 0; i < evict_buffer.size(); i += 8) evict_buffer[i] = sum += evict_buffer[i];
  touched = touched + sum;
}
struct no_op_event {
  void record(id_stream const& s) { driver_call(s.id); }
  [[nodiscard]] bool ready() const { return true; }
  void wait_on(id_stream const& s) const { driver_call(s.id); }
  void synchronize() const {}
};

struct aligned_new_resource {
  void* allocate(id_stream const&, std::size_t bytes, std::size_t alignment = 256) {
    return ::operator new(bytes, std::align_val_t(alignment));
  }
  void deallocate(id_stream const&, void* p, std::size_t, std::size_t alignment = 256) noexcept {
    ::operator delete(p, std::align_val_t(alignment));
  }
  friend bool operator==(aligned_new_resource, aligned_new_resource) = default;
};

using pool_type = hp::unit_pool<id_stream, no_op_event, aligned_new_resource>;

}  // namespace pool_bookkeeping

namespace {

using namespace pool_bookkeeping;

struct row {
  std::string workload, scenario;
  std::size_t units, max_buckets;
  double median_ns, p10_ns, p90_ns;
};

row measure(hp::workload const& w, bool two_streams, int reps) {
  auto const plan = hp::make_plan<hp::max>(w, {}, hp::pad_elements{64});
  std::size_t const n = plan.unit_names.size();
  std::size_t max_buckets = 0;
  for (auto const& b : plan.bucket_bytes) max_buckets = std::max(max_buckets, b.size());
  id_stream const all_gather{1}, compute{two_streams ? 2 : 1};
  pool_type pool(plan, aligned_new_resource{}, all_gather);
  std::vector<pool_type::lease> held(n);
  auto step = [&] {
    for (int pass = 0; pass < 2; ++pass) {
      auto unit = [&](std::size_t i) { return pass == 0 ? i : n - 1 - i; };
      held[unit(0)] = pool.acquire(unit(0), all_gather);
      for (std::size_t i = 0; i < n; ++i) {
        if (i + 1 < n) held[unit(i + 1)] = pool.acquire(unit(i + 1), all_gather);
        pool.release(held[unit(i)], compute);
      }
    }
  };
  // The same trace's driver calls alone: one wait per acquire and one record per release on two
  // streams (the default records only where a lease crosses streams), none on one stream.
  auto calls_alone = [&] {
    if (!two_streams) return;
    for (int pass = 0; pass < 2; ++pass) {
      driver_call(1);
      for (std::size_t i = 0; i < n; ++i) {
        if (i + 1 < n) driver_call(1);
        driver_call(2);
      }
    }
  };
  int const steps = evict_buffer.empty() ? 200 : 20;
  for (int i = 0; i < 20; ++i) step();
  std::vector<double> ns;
  double const pairs = steps * 2.0 * static_cast<double>(n);
  for (int r = 0; r < reps; ++r) {
    auto const t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) step();
    auto const t1 = std::chrono::steady_clock::now();
    if (!evict_buffer.empty())
      for (int s = 0; s < steps; ++s) calls_alone();
    auto const t2 = std::chrono::steady_clock::now();
    ns.push_back((std::chrono::duration<double, std::nano>(t1 - t0).count() -
                  std::chrono::duration<double, std::nano>(t2 - t1).count()) / pairs);
  }
  std::sort(ns.begin(), ns.end());
  auto at = [&](double q) { return ns[static_cast<std::size_t>(q * static_cast<double>(ns.size() - 1))]; };
  return {plan.workload_name, two_streams ? "two streams" : "one stream", n, max_buckets, at(0.5), at(0.1), at(0.9)};
}

}  // namespace

int main(int argc, char** argv) {
  int const reps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 21;
  int const evict_kib = argc > 2 ? std::max(0, std::atoi(argv[2])) : 0;
  evict_buffer.assign(static_cast<std::size_t>(evict_kib) * 1024 / sizeof(unsigned long long), 1);
  hp::models::build_options ep64;
  ep64.expert_parallel = 64;
  std::vector<hp::workload> const workloads{hp::models::make_workload(hp::models::nemotron_h_8b()),
                                            hp::models::make_workload(hp::models::nemotron_3_super_120b_a12b(), ep64)};
  std::vector<row> rows;
  for (auto const& w : workloads)
    for (bool two : {false, true}) rows.push_back(measure(w, two, reps));
  if (evict_kib == 0)
    std::printf("unit_pool bookkeeping per acquire + release pair (no-op events; median of %d reps of 200 steps)\n", reps);
  else
    std::printf("unit_pool bookkeeping per acquire + release pair, each record and wait sweeping %d KiB (minus the sweeps "
                "alone; median of %d reps of 20 steps)\n", evict_kib, reps);
  std::printf("%-34s %-12s %6s %8s %10s %21s\n", "workload", "streams", "units", "buckets", "median ns", "p10..p90 ns");
  for (auto const& r : rows)
    std::printf("%-34s %-12s %6zu %8zu %10.1f %10.1f..%-10.1f\n", r.workload.c_str(), r.scenario.c_str(), r.units,
                r.max_buckets, r.median_ns, r.p10_ns, r.p90_ns);
  std::printf("{\"bench\":\"pool_bookkeeping\",\"reps\":%d,\"evict_kib\":%d,\"rows\":[", reps, evict_kib);
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::printf("%s{\"workload\":\"%s\",\"streams\":\"%s\",\"units\":%zu,\"max_buckets\":%zu,\"median_ns\":%.1f,"
                "\"p10_ns\":%.1f,\"p90_ns\":%.1f}",
                i ? "," : "", rows[i].workload.c_str(), rows[i].scenario.c_str(), rows[i].units, rows[i].max_buckets,
                rows[i].median_ns, rows[i].p10_ns, rows[i].p90_ns);
  std::printf("]}\n");
  return 0;
}
