// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// One collective before the first transfer: every rank of an executor must hold the same
// schedule (shape and every rank's action list) and the same per-stage sizes, or the ranks
// would hang (different transfer orders) or silently compute on the wrong tensors (the same
// transfers in another micro-batch order). Each rank reduces what it holds to a few words; the
// executor all-gathers them, and every rank reaches the same verdict from the same words.
//
//   auto const words = pipeline::fingerprint(sched, bytes);     // fingerprint_words int64 words
//   std::string why = pipeline::detail::disagreement(all_words, ranks, "pipeline::executor");
//
// The words: the shape (p, m, v, g), a 64-bit FNV-1a hash of every action of every rank, a
// hash of the sizes, the number of actions, a hash of the placement of virtual stages on ranks
// (two ranks with another placement run other local hand-offs), and whether this rank accepted its own inputs (a
// rank whose inputs are invalid still joins the collective, so that no peer waits for it).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/stage_bytes.hpp"

namespace headroom::pipeline {

inline constexpr std::size_t fingerprint_words = 9;
using fingerprint_t = std::array<std::int64_t, fingerprint_words>;

namespace detail {
struct fnv1a {
  std::uint64_t h = 1469598103934665603ULL;
  void add(std::uint64_t x) noexcept {
    for (int i = 0; i < 8; ++i) {
      h ^= (x >> (8 * i)) & 0xffU;
      h *= 1099511628211ULL;
    }
  }
};
enum fingerprint_field : std::size_t { f_magic, f_accepted, f_p, f_m, f_v, f_g, f_actions, f_sizes, f_placement };
inline constexpr std::int64_t fingerprint_magic = 0x48525049;  // "HRPI": every rank runs this protocol
}  // namespace detail

/// What a rank holds, in fingerprint_words words. `accepted` says whether the rank's own checks
/// of its inputs passed. The names of schedules do not count: equal lists under another name run.
[[nodiscard]] inline fingerprint_t fingerprint(schedule const& s, model_bytes const& bytes, bool accepted = true) {
  detail::fnv1a actions;
  actions.add(static_cast<std::uint64_t>(s.kind()));
  std::uint64_t count = 0;
  for (auto const& list : s.ranks()) {
    actions.add(0xffffffffULL);  // rank separator: moving an action to another rank changes the hash
    for (auto const& a : list) {
      actions.add((static_cast<std::uint64_t>(a.kind) << 56) ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.peer)) << 24));
      actions.add((static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.microbatch)) << 32) |
                  static_cast<std::uint32_t>(a.stage));
      if (a.kind == action_kind::overlapped)  // only then: the hash of every other action is unchanged
        actions.add((static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.backward_microbatch)) << 32) |
                    static_cast<std::uint32_t>(a.backward_stage));
      ++count;
    }
  }
  detail::fnv1a sizes;
  for (int k = 0; k < std::max(bytes.microbatches(), 1); ++k)
    for (int st = 0; st < bytes.size(); ++st) {
      auto const& b = bytes.at(st, k);
      sizes.add(b.activations);
      sizes.add(b.output);
      sizes.add(b.weight_stash);
      sizes.add(b.parameters);
    }
  sizes.add(static_cast<std::uint64_t>(bytes.size()));
  sizes.add(static_cast<std::uint64_t>(bytes.microbatches()));
  detail::fnv1a where;
  auto const& pl = s.placement();
  for (int r = 0; r < pl.ranks(); ++r)
    for (int c = 0; c < pl.chunks(); ++c) where.add(static_cast<std::uint64_t>(pl.virtual_stage(r, c)));
  auto const& shape = s.shape();
  fingerprint_t w{};
  w[detail::f_magic] = detail::fingerprint_magic;
  w[detail::f_accepted] = accepted ? 1 : 0;
  w[detail::f_p] = shape.stages;
  w[detail::f_m] = shape.microbatches;
  w[detail::f_v] = shape.chunks;
  w[detail::f_g] = shape.group;
  w[detail::f_actions] = static_cast<std::int64_t>(actions.h ^ (count * 0x9e3779b97f4a7c15ULL));
  w[detail::f_sizes] = static_cast<std::int64_t>(sizes.h);
  w[detail::f_placement] = static_cast<std::int64_t>(where.h);
  return w;
}

namespace detail {
/// The verdict on every rank's fingerprint (`all`: fingerprint_words per rank, rank-major),
/// identical on every rank: empty when all agree and all accepted their inputs.
[[nodiscard]] inline std::string disagreement(std::span<std::int64_t const> all, int ranks, char const* who) {
  using headroom::detail::concat;
  auto const word = [&](int r, std::size_t f) { return all[static_cast<std::size_t>(r) * fingerprint_words + f]; };
  std::string rejected;
  for (int r = 0; r < ranks; ++r)
    if (word(r, f_magic) != fingerprint_magic) return concat(who, ": rank ", r, " is not running a pipeline executor's check (it called another collective)");
  for (int r = 0; r < ranks; ++r)
    if (word(r, f_accepted) == 0) rejected += concat(rejected.empty() ? "" : ", ", r);
  if (!rejected.empty())
    return concat(who, ": rank(s) ", rejected, " rejected their schedule or sizes (their own error says why); no rank runs the step");
  std::string diff;
  for (int r = 1; r < ranks; ++r) {
    std::string what;
    auto const add = [&](auto const&... part) { what += concat(what.empty() ? "" : "; ", part...); };
    if (word(r, f_p) != word(0, f_p) || word(r, f_m) != word(0, f_m) || word(r, f_v) != word(0, f_v) || word(r, f_g) != word(0, f_g))
      add("shape p=", word(r, f_p), " m=", word(r, f_m), " v=", word(r, f_v), " g=", word(r, f_g), " vs p=", word(0, f_p),
          " m=", word(0, f_m), " v=", word(0, f_v), " g=", word(0, f_g));
    else if (word(r, f_placement) != word(0, f_placement))
      add("the placement of virtual stages on ranks (same shape, another stage -> rank map)");
    else if (word(r, f_actions) != word(0, f_actions))
      add("the action lists (same shape, another order of computations or transfers)");
    if (word(r, f_sizes) != word(0, f_sizes)) add("the per-stage sizes (model_bytes)");
    if (!what.empty()) diff += concat(" rank ", r, " differs from rank 0 in ", what, ';');
  }
  if (diff.empty()) return {};
  return concat(who, ": the ranks hold different schedules or sizes, expected one for all:", diff);
}
}  // namespace detail

}  // namespace headroom::pipeline
