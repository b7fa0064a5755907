// Footprint of fixed-address pools for real hybrid models (reference/maxpool.md §8): the arena
// each planner asks for, and the bytes it leaves to a fallback (dynamic: no NCCL registration,
// no CUDA graphs; or persistent: full memory cost). Pure planning: runs on any CPU.
//
//   bench_pool_footprint            table, then one JSON line
//
// Columns (one rank, TP = 1, 2 buffers, parameter pool only):
//   fixed arena / fixed left out   Megatron FixedPool: slots for the commonest unit shape only;
//                                  "left out" = bytes of the units that get no slot
//   max arena                      Megatron MaxPool (slots per dtype)
//   max-by-bytes arena             MaxPool with slots shared across dtypes (headroom only)
//   non-unit                       embedding + final norm + output layer: fallback for all planners
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "headroom/pool/models.hpp"
#include "headroom/pool/plan.hpp"

namespace hp = headroom::pool;

namespace {
double gib(std::uint64_t b) { return static_cast<double>(b) / static_cast<double>(headroom::GiB); }

struct row {
  std::string workload;
  std::size_t units = 0;
  std::size_t fixed_pooled = 0;
  std::uint64_t fixed_arena = 0, fixed_left_out = 0, max_arena = 0, bytes_arena = 0, non_unit = 0;
  std::uint64_t fixed_fallback = 0, max_fallback = 0, bytes_fallback = 0;
};

row measure(hp::workload const& w) {
  auto const f = hp::make_plan<hp::fixed>(w);
  auto const m = hp::make_plan<hp::max, hp::by_dtype>(w);
  auto const b = hp::make_plan<hp::max, hp::by_bytes>(w);
  return {w.name,        w.units.size(),      f.pooled_units(),   f.arena_bytes,     f.unpooled_unit_bytes(),
          m.arena_bytes, b.arena_bytes,       w.non_unit_bytes(), f.fallback_bytes(), m.fallback_bytes(),
          b.fallback_bytes()};
}
}  // namespace

int main() {
  std::vector<row> rows;
  for (bool fp8 : {false, true})
    for (auto const& c : hp::models::reference_cases()) {
      hp::models::build_options o;
      o.expert_parallel = c.expert_parallel;
      o.fp8_params = fp8;
      rows.push_back(measure(hp::models::make_workload(c.config, o)));
    }

  std::printf("%-38s %5s %8s %10s %12s %10s %12s %9s %13s\n", "workload (params, 2 buffers)", "units", "fixed", "fixed",
              "fixed", "max", "max-by-bytes", "non-unit", "fixed/max");
  std::printf("%-38s %5s %8s %10s %12s %10s %12s %9s %13s\n", "", "", "pooled", "arena GiB", "left-out GiB", "arena GiB",
              "arena GiB", "GiB", "persist ratio");
  for (auto const& r : rows) {
    // With persistent fallback, memory = arena + everything left to the fallback.
    double const fixed_persist = gib(r.fixed_arena + r.fixed_fallback);
    double const max_persist = gib(r.max_arena + r.max_fallback);
    std::printf("%-38s %5zu %8zu %10.2f %12.2f %10.2f %12.2f %9.2f %13.2f\n", r.workload.c_str(), r.units,
                r.fixed_pooled, gib(r.fixed_arena), gib(r.fixed_left_out), gib(r.max_arena), gib(r.bytes_arena),
                gib(r.non_unit), fixed_persist / max_persist);
  }

  std::printf("{\"bench\":\"pool_footprint\",\"buffers\":2,\"rows\":[");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto const& r = rows[i];
    std::printf(
        "%s{\"workload\":\"%s\",\"units\":%zu,\"fixed_pooled_units\":%zu,\"fixed_arena_bytes\":%llu,"
        "\"fixed_left_out_bytes\":%llu,\"fixed_fallback_bytes\":%llu,\"max_arena_bytes\":%llu,"
        "\"max_fallback_bytes\":%llu,\"max_by_bytes_arena_bytes\":%llu,\"max_by_bytes_fallback_bytes\":%llu,"
        "\"non_unit_bytes\":%llu}",
        i ? "," : "", r.workload.c_str(), r.units, r.fixed_pooled, static_cast<unsigned long long>(r.fixed_arena),
        static_cast<unsigned long long>(r.fixed_left_out), static_cast<unsigned long long>(r.fixed_fallback),
        static_cast<unsigned long long>(r.max_arena), static_cast<unsigned long long>(r.max_fallback),
        static_cast<unsigned long long>(r.bytes_arena), static_cast<unsigned long long>(r.bytes_fallback),
        static_cast<unsigned long long>(r.non_unit));
  }
  std::printf("]}\n");
  return 0;
}
