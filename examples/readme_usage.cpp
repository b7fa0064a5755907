// SPDX-License-Identifier: Apache-2.0
// A model whose layers differ in shape (attention, Mamba, MoE) gets one arena at fixed
// addresses: planned from the units' buckets before a byte is allocated, then each unit's
// buffers are leased in the order the step runs, one unit prefetched. Host memory here; on a
// GPU the same plan drives headroom::pool::cuda_unit_pool (docs/pool.md).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <headroom/pool.hpp>

namespace hp = headroom::pool;

int main() {
  hp::workload w{"hybrid", {}, {}};
  std::uint64_t const elements[] = {4u << 20, 3u << 20, 16u << 20};  // attention, Mamba, MoE
  for (int layer = 0; layer < 6; ++layer)
    w.units.push_back({"layer." + std::to_string(layer), {hp::elements_of(headroom::dtype::bf16, elements[layer % 3])}});

  std::vector<hp::execution_order> const orders{hp::training_order(w)};  // forward, then backward
  hp::plan const plan = hp::make_interval_plan(w, orders, {.resident = 2});
  hp::plan const maxpool = hp::make_plan<hp::max>(w);  // Megatron-FSDP's MaxPool, as planned
  std::printf("arena %llu MiB (interval), %llu MiB (MaxPool plan), lower bound %llu MiB\n",
              static_cast<unsigned long long>(plan.arena_bytes >> 20),
              static_cast<unsigned long long>(maxpool.arena_bytes >> 20),
              static_cast<unsigned long long>(hp::lower_bound(w, orders, 2) >> 20));

  hp::host_unit_pool<> pool(plan, headroom::host::aligned_resource{}, {});
  std::vector<hp::host_unit_pool<>::lease> held(w.units.size());
  std::vector<std::byte*> first_address(w.units.size(), nullptr);
  bool fixed = true;  // a unit gets the same address every time it is leased
  auto const& order = orders[0].units;
  held[order[0]] = pool.acquire(order[0], {});
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i + 1 < order.size() && order[i + 1] != order[i]) held[order[i + 1]] = pool.acquire(order[i + 1], {});
    std::byte* const at = held[order[i]].bytes(0).data();  // compute on unit order[i] here
    fixed = fixed && (first_address[order[i]] == nullptr || first_address[order[i]] == at);
    first_address[order[i]] = at;
    if (i + 1 == order.size() || order[i + 1] != order[i]) pool.release(held[order[i]], {});
  }
  std::printf("%zu unit visits, addresses fixed: %s\n", order.size(), fixed ? "yes" : "no");
  return fixed && plan.arena_bytes < maxpool.arena_bytes ? 0 : 1;
}
