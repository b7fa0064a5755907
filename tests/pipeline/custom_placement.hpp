// SPDX-License-Identifier: Apache-2.0
#pragma once
// A schedule on a user's placement, as a generator tag for the executor and memory-model tests:
// rank r holds the contiguous block of virtual stages r·v .. r·v + v − 1 (a table neither
// interleaved nor V for p, v >= 2), so every hand-off inside a block is local and only the
// block boundaries cross ranks. GPipe's order: every forward chunk by chunk, then every
// backward from the last chunk down.
#include <string>
#include <string_view>
#include <vector>

#include "headroom/pipeline.hpp"

namespace test_placement {

inline headroom::pipeline::placement blocks(int p, int v) {
  std::vector<std::vector<int>> table(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r)
    for (int c = 0; c < v; ++c) table[static_cast<std::size_t>(r)].push_back(r * v + c);
  return headroom::pipeline::placement::from_table(table);
}

struct block_gpipe {
  static constexpr std::string_view name = "block_gpipe";
  [[nodiscard]] static headroom::pipeline::schedule generate(headroom::pipeline::pipeline_shape const& shape) {
    namespace hp = headroom::pipeline;
    auto const where = blocks(shape.stages, shape.chunks);
    std::vector<std::vector<hp::action>> order(static_cast<std::size_t>(shape.stages));
    for (int r = 0; r < shape.stages; ++r) {
      auto& o = order[static_cast<std::size_t>(r)];
      for (int c = 0; c < shape.chunks; ++c)
        for (int k = 0; k < shape.microbatches; ++k)
          o.push_back({hp::action_kind::forward, k, where.virtual_stage(r, c), -1});
      for (int c = shape.chunks - 1; c >= 0; --c)
        for (int k = 0; k < shape.microbatches; ++k)
          o.push_back({hp::action_kind::backward, k, where.virtual_stage(r, c), -1});
    }
    return hp::place_transfers(std::string(name), shape, where, order);
  }
};
static_assert(headroom::pipeline::schedule_generator<block_gpipe>);

}  // namespace test_placement
