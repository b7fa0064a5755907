// SPDX-License-Identifier: Apache-2.0
// pool: fixed, max and interval planning of a real hybrid model, then a pool driving its units.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "headroom/core.hpp"
#include "headroom/pool.hpp"
#include "headroom/pool/models.hpp"
#include "printer.hpp"

void demo_pool(headroom::demo::printer& p) {
  namespace hp = headroom::pool;
  using headroom::format_bytes;

  p.section("pool: fixed-address double buffers for a hybrid model (Nemotron-3-Nano-30B-A3B, EP8)");
  hp::models::build_options ep8;
  ep8.expert_parallel = 8;
  auto const w = hp::models::make_workload(hp::models::nemotron_3_nano_30b_a3b(), ep8);
  p.line(w.units.size(), " units (23 Mamba, 23 MoE, 6 attention), non-unit ", format_bytes(w.non_unit_bytes()));

  auto const fixed = hp::make_plan<hp::fixed>(w);
  auto const max = hp::make_plan<hp::max>(w);
  // The interval planner, given the orders the engine runs (training and evaluation) and two
  // resident units (one prefetched), as max's two buffers allow.
  std::vector<hp::execution_order> const orders{hp::training_order(w), hp::evaluation_order(w)};
  auto const interval = hp::make_interval_plan(w, orders, {.resident = 2});
  auto const bound = hp::lower_bound(w, orders, 2);
  headroom::demo::table t{"planner", "slots", "arena", "units pooled", "units left out", "left-out bytes"};
  t.row("fixed (FixedPool)", fixed.slots.size(), format_bytes(fixed.arena_bytes), fixed.pooled_units(),
        fixed.unit_count() - fixed.pooled_units(), format_bytes(fixed.unpooled_unit_bytes()));
  t.row("max (MaxPool, planned)", max.slots.size(), format_bytes(max.arena_bytes), max.pooled_units(),
        max.unit_count() - max.pooled_units(), format_bytes(max.unpooled_unit_bytes()));
  t.row("interval (train+eval)", interval.slots.size(), format_bytes(interval.arena_bytes), interval.pooled_units(),
        interval.unit_count() - interval.pooled_units(), format_bytes(interval.unpooled_unit_bytes()));
  p.print(t);
  p.line("lower bound of any fixed-address plan for these orders (2 resident units): ", format_bytes(bound));
  // Megatron-FSDP allocates MaxPool's buffers lazily, each as large as the largest request made of
  // it: measured by replaying its own MaxPoolAllocator (megatron-fsdp 0.6.1) through a training
  // step of this workload, bench/pool_megatron_runtime.py.
  p.line("Megatron-FSDP 0.6.1 at run time holds less than its plan: ", format_bytes(679'187'712),
         " for this workload (its MaxPoolAllocator replayed through a training step)");
  p.line("max plan:");
  std::string const text = max.to_string();
  for (std::size_t a = 0, b; a < text.size(); a = b + 1) {
    b = text.find('\n', a);
    if (b == std::string::npos) b = text.size();
    p.line("  ", text.substr(a, b - a));
  }
  // MaxPool's slots worked out by hand from the model's configuration: the MoE unit's two bf16
  // buckets, its 16 local experts (128 over EP 8) and the rest (shared expert 2 x 2688 x 3712,
  // router 2688 x 128, norm); FixedPool pools the 23 Mamba units.
  p.check(max.shapes.size() == 2 && max.shapes[0].bytes == 2ull * 159'645'696 && max.shapes[1].bytes == 2ull * 20'302'464,
          "max slots = [159,645,696, 20,302,464] bf16 elements, the MoE unit's buckets as counted by hand from the config");
  p.check(fixed.pooled_units() == 23 && fixed.unpooled_unit_bytes() == 8'558'403'840ull,
          "fixed pools the 23 Mamba units only and leaves 7.97 GiB of units to fallback");
  p.check(max.pooled_units() == w.units.size() && max.arena_bytes < fixed.arena_bytes + fixed.unpooled_unit_bytes(),
          "max pools every unit in less memory than fixed + persistent fallback");
  p.check(interval.pooled_units() == w.units.size() && interval.arena_bytes == bound && interval.arena_bytes < max.arena_bytes,
          "interval pools every unit at the lower bound, ", format_bytes(interval.arena_bytes), " against MaxPool's ",
          format_bytes(max.arena_bytes), " as planned");

  // Drive a scaled-down copy through the pool on the host substrate: forward then backward,
  // one unit prefetched; with 2 buffers and strict assignment no unit ever moves.
  hp::models::hybrid_config small = hp::models::nemotron_3_nano_30b_a3b();
  small.hidden = 64;
  small.mamba_heads = 4;
  small.heads = 4;
  small.experts = 8;
  small.moe_ffn = 32;
  small.shared_ffn = 64;
  small.vocab = 256;
  auto const sw = hp::models::make_workload(small);
  hp::host_unit_pool<hp::strict> pool(hp::make_plan<hp::max>(sw), headroom::host::aligned_resource{}, {});
  std::vector<hp::host_unit_pool<hp::strict>::lease> held(sw.units.size());
  std::size_t const n = sw.units.size();
  for (int pass = 0; pass < 2; ++pass) {
    auto unit = [&](std::size_t i) { return pass == 0 ? i : n - 1 - i; };
    held[unit(0)] = pool.acquire(unit(0), {});
    for (std::size_t i = 0; i < n; ++i) {
      if (i + 1 < n) held[unit(i + 1)] = pool.acquire(unit(i + 1), {});
      pool.release(held[unit(i)], {});
    }
  }
  auto const& s = pool.stats();
  p.line("scaled-down run (hidden 64): ", s);
  p.check(s.moves == 0 && s.slots_in_use == 0 && s.acquisitions == 2 * n,
          "forward + backward with one unit prefetched: ", s.acquisitions, " acquisitions, no strict moves");
}
