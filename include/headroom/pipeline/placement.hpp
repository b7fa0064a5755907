// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Where each virtual stage runs: the map virtual stage s -> (rank, chunk) of a pipeline with p
// ranks holding v chunks each.
//
//   placement::interleaved(p, v)  s on rank s mod p as chunk s / p (Megatron's interleaved
//                                 placement; the default of every schedule)
//   placement::v_shape(p, v)      chunk c of rank r is stage c·p + r for even c and c·p + p − 1 − r
//                                 for odd c: with v = 2, rank r holds r and 2p − 1 − r, so the
//                                 first and the last stage live on rank 0 (ZBV, DualPipeV)
//   placement::from_table(t)      t[r] = the virtual stages of rank r, chunk by chunk
//
// Two consecutive virtual stages on the same rank (p − 1 and p in a V) exchange nothing over the
// network: the lowering hands the output over locally, the validator refuses a send or recv
// between them, and the executor moves the buffer from one chunk to the next.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/shape.hpp"

namespace headroom::pipeline {

class placement {
 public:
  enum class style : std::uint8_t { interleaved, v_shape, custom };

  /// The interleaved placement of one rank holding one chunk (the placement of p = v = 1).
  placement() : placement(interleaved(1, 1)) {}

  /// Virtual stage s on rank s mod p as chunk s / p. Throws as pipeline_shape::check does.
  [[nodiscard]] static placement interleaved(int p, int v) {
    check_sizes(p, v, "pipeline::placement::interleaved");
    placement out(style::interleaved, p, v);
    for (int c = 0; c < v; ++c)
      for (int r = 0; r < p; ++r) out.put(r, c, c * p + r);
    return out;
  }
  [[nodiscard]] static placement interleaved(pipeline_shape const& shape) { return interleaved(shape.stages, shape.chunks); }

  /// Zig-zag: chunk c of rank r is c·p + r for even c, c·p + p − 1 − r for odd c.
  [[nodiscard]] static placement v_shape(int p, int v) {
    check_sizes(p, v, "pipeline::placement::v_shape");
    placement out(style::v_shape, p, v);
    for (int c = 0; c < v; ++c)
      for (int r = 0; r < p; ++r) out.put(r, c, c * p + (c % 2 == 0 ? r : p - 1 - r));
    return out;
  }
  [[nodiscard]] static placement v_shape(pipeline_shape const& shape) { return v_shape(shape.stages, shape.chunks); }

  /// A user's map: `table[r]` lists the virtual stages of rank r in chunk order. Throws
  /// invalid_argument unless every rank holds the same number v >= 1 of chunks and every virtual
  /// stage in [0, p·v) appears exactly once. A table equal to the interleaved or V placement
  /// is that placement (same style, equal).
  [[nodiscard]] static placement from_table(std::vector<std::vector<int>> const& table) {
    char const* who = "pipeline::placement::from_table";
    expects(!table.empty(), who, ": 0 ranks, expected one list of virtual stages per rank");
    auto const p = static_cast<int>(table.size());
    auto const v = static_cast<int>(table[0].size());
    for (std::size_t r = 0; r < table.size(); ++r)
      expects(static_cast<int>(table[r].size()) == v && v >= 1, who, ": rank ", r, " holds ", table[r].size(),
              " chunks, expected every rank to hold v = ", v, " >= 1 (as many as rank 0)");
    check_sizes(p, v, who);
    placement out(style::custom, p, v);
    for (int r = 0; r < p; ++r)
      for (int c = 0; c < v; ++c) {
        int const s = table[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)];
        expects(s >= 0 && s < p * v, who, ": rank ", r, " chunk ", c, " is virtual stage ", s, ", expected one in [0, ", p * v,
                ") for p = ", p, ", v = ", v);
        int const other = out.rank_[static_cast<std::size_t>(s)];
        expects(other < 0, who, ": virtual stage ", s, " is on rank ", other, " chunk ",
                out.chunk_[static_cast<std::size_t>(s)], " and again on rank ", r, " chunk ", c,
                ", expected every virtual stage on exactly one rank");
        out.put(r, c, s);
      }
    // p·v distinct values in [0, p·v): every stage is placed. Name the standard styles.
    if (out.same_map(interleaved(p, v))) out.style_ = style::interleaved;
    else if (out.same_map(v_shape(p, v))) out.style_ = style::v_shape;
    return out;
  }

  [[nodiscard]] style kind() const noexcept { return style_; }
  [[nodiscard]] std::string_view name() const noexcept {
    switch (style_) {
      case style::interleaved: return "interleaved";
      case style::v_shape: return "v_shape";
      case style::custom: return "custom";
    }
    return "?";
  }
  [[nodiscard]] int ranks() const noexcept { return p_; }
  [[nodiscard]] int chunks() const noexcept { return v_; }
  [[nodiscard]] int virtual_stages() const noexcept { return p_ * v_; }

  /// The rank and chunk of virtual stage s, and the stage of (rank, chunk). Callers pass indices
  /// in range (validate() checks a schedule's before anything looks them up).
  [[nodiscard]] int rank_of(int s) const noexcept { return rank_[static_cast<std::size_t>(s)]; }
  [[nodiscard]] int chunk_of(int s) const noexcept { return chunk_[static_cast<std::size_t>(s)]; }
  [[nodiscard]] int virtual_stage(int rank, int chunk) const noexcept {
    return stage_[static_cast<std::size_t>(rank) * static_cast<std::size_t>(v_) + static_cast<std::size_t>(chunk)];
  }
  /// True when stages s and t are on the same rank (a hand-off between them is local).
  [[nodiscard]] bool same_rank(int s, int t) const noexcept { return rank_of(s) == rank_of(t); }

  /// Throws invalid_argument unless this placement has the shape's p and v.
  void check(pipeline_shape const& shape, std::string_view who) const {
    expects(p_ == shape.stages && v_ == shape.chunks, who, ": placement ", name(), " is for p = ", p_, ", v = ", v_,
            ", expected the shape's p = ", shape.stages, ", v = ", shape.chunks);
  }

  /// Equal maps are equal placements (a table that spells out the interleaved map is it).
  friend bool operator==(placement const& a, placement const& b) noexcept { return a.same_map(b); }

  /// "interleaved", "v_shape", or "custom [[0, 3], [1, 2]]".
  friend std::ostream& operator<<(std::ostream& os, placement const& pl) {
    os << pl.name();
    if (pl.style_ != style::custom) return os;
    os << " [";
    for (int r = 0; r < pl.p_; ++r) {
      os << (r ? ", [" : "[");
      for (int c = 0; c < pl.v_; ++c) os << (c ? ", " : "") << pl.virtual_stage(r, c);
      os << ']';
    }
    return os << ']';
  }

 private:
  // Each table filled in place (not copied from the first: g++ 13 -O3 misreads that copy of a
  // one-element vector as out of bounds, -Warray-bounds).
  placement(style st, int p, int v)
      : style_(st), p_(p), v_(v), rank_(cells(p, v), -1), chunk_(cells(p, v), -1), stage_(cells(p, v), -1) {}
  [[nodiscard]] static std::size_t cells(int p, int v) noexcept {
    return static_cast<std::size_t>(p) * static_cast<std::size_t>(v);
  }
  static void check_sizes(int p, int v, char const* who) { pipeline_shape{p, 1, v, 0}.check(who); }
  void put(int r, int c, int s) {
    rank_[static_cast<std::size_t>(s)] = r;
    chunk_[static_cast<std::size_t>(s)] = c;
    stage_[static_cast<std::size_t>(r) * static_cast<std::size_t>(v_) + static_cast<std::size_t>(c)] = s;
  }
  [[nodiscard]] bool same_map(placement const& o) const noexcept { return p_ == o.p_ && v_ == o.v_ && stage_ == o.stage_; }

  style style_ = style::interleaved;
  int p_ = 1;
  int v_ = 1;
  std::vector<int> rank_;   // [stage]
  std::vector<int> chunk_;  // [stage]
  std::vector<int> stage_;  // [rank · v + chunk]
};

}  // namespace headroom::pipeline
