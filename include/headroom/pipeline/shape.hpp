// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The shape of a pipeline: p ranks (stages), m micro-batches per step, v model chunks per rank,
// and the micro-batch group size g of the interleaved schedule (Megatron's
// microbatch_group_size_per_vp_stage; 0 means "p", Megatron's default).
//
// rank_of / chunk_of / virtual_stage are the interleaved placement: virtual stage s in [0, p·v)
// on rank s mod p as chunk s / p, so consecutive virtual stages are on neighbouring ranks and
// virtual stage 0 and the last one are on ranks 0 and p − 1. A schedule may place its stages
// otherwise (placement.hpp, schedule::placement()); code that walks a schedule asks it.
#include <cstdint>
#include <ostream>

#include "headroom/core/error.hpp"

namespace headroom::pipeline {

struct pipeline_shape {
  int stages = 1;        // p: ranks in the pipeline group
  int microbatches = 1;  // m
  int chunks = 1;        // v: model chunks (virtual stages) per rank
  int group = 0;         // g: interleaved micro-batch group size; 0 = p

  [[nodiscard]] constexpr int virtual_stages() const noexcept { return stages * chunks; }
  [[nodiscard]] constexpr int group_size() const noexcept { return group == 0 ? stages : group; }
  [[nodiscard]] constexpr int rank_of(int virtual_stage) const noexcept { return virtual_stage % stages; }
  [[nodiscard]] constexpr int chunk_of(int virtual_stage) const noexcept { return virtual_stage / stages; }
  [[nodiscard]] constexpr int virtual_stage(int rank, int chunk) const noexcept { return chunk * stages + rank; }
  [[nodiscard]] constexpr bool is_last(int virtual_stage) const noexcept { return virtual_stage == virtual_stages() - 1; }

  /// Most virtual stages (p·v), micro-batch slots per rank (m·v) and (micro-batch, virtual
  /// stage) pairs (m·p·v) a shape may have: every index stays an int, and a schedule's lists
  /// (about six actions per pair) and the validator's table stay within a few GiB.
  static constexpr std::int64_t max_virtual_stages = std::int64_t{1} << 20;
  static constexpr std::int64_t max_slots = std::int64_t{1} << 24;
  static constexpr std::int64_t max_pairs = std::int64_t{1} << 24;
  /// Most p·(m·v + p): the ranks times the ticks of a step (about 2·m·v + 2·p). Building a
  /// schedule, validating it and simulating it take time in proportion, a few seconds at the
  /// limit; every shape within max_pairs with p <= 4096 fits (p = 128 with m·v = 2^17, p = 4096
  /// with m·v = 4096).
  static constexpr std::int64_t max_rank_ticks = std::int64_t{1} << 25;

  /// Throws invalid_argument unless p, m, v >= 1 and g >= 0, and capacity_error when p·v, m·v,
  /// m·p·v or p·(m·v + p) exceeds its limit above (the products are taken in 64 bits, so none can wrap);
  /// `who` prefixes the message (the schedule or function that was given the shape).
  void check(char const* who) const {
    expects(stages >= 1, who, ": stages (p) = ", stages, ", expected >= 1");
    expects(microbatches >= 1, who, ": microbatches (m) = ", microbatches, ", expected >= 1");
    expects(chunks >= 1, who, ": chunks (v) = ", chunks, ", expected >= 1 model chunk per rank");
    expects(group >= 0, who, ": group (g) = ", group, ", expected >= 0 (0 means p)");
    std::int64_t const p = stages, m = microbatches, v = chunks;  // each < 2^31: products fit
    expects<capacity_error>(p * v <= max_virtual_stages, who, ": p·v = ", p, " · ", v, " = ", p * v,
                            " virtual stages, expected <= ", max_virtual_stages, " (2^20)");
    expects<capacity_error>(m * v <= max_slots, who, ": m·v = ", m, " · ", v, " = ", m * v,
                            " micro-batch slots per rank, expected <= ", max_slots, " (2^24)");
    expects<capacity_error>(m * p * v <= max_pairs, who, ": m·p·v = ", m, " · ", p, " · ", v, " = ", m * p * v,
                            " (micro-batch, virtual stage) pairs, expected <= ", max_pairs, " (2^24)");
    expects<capacity_error>(p * (m * v + p) <= max_rank_ticks, who, ": p·(m·v + p) = ", p, " · (", m, " · ", v, " + ", p,
                            ") = ", p * (m * v + p), " rank-ticks, expected <= ", max_rank_ticks,
                            " (2^25: a schedule takes time in proportion to build, validate and simulate)");
  }
  /// Throws invalid_argument unless `rank` is in [0, p).
  void check_rank(int rank, char const* who) const {
    expects(rank >= 0 && rank < stages, who, ": stage ", rank, " out of range [0, ", stages, ") for p = ", stages);
  }

  friend constexpr bool operator==(pipeline_shape const&, pipeline_shape const&) noexcept = default;
  friend std::ostream& operator<<(std::ostream& os, pipeline_shape const& s) {
    os << "p=" << s.stages << " m=" << s.microbatches << " v=" << s.chunks;
    if (s.chunks > 1) os << " g=" << s.group_size();
    return os;
  }
};

}  // namespace headroom::pipeline
