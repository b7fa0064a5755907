// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The schema of a report, hashed: each key's name is hashed once (FNV-1a 64, cached by dynamic
// reports, constexpr for typed ones), then the per-key name hashes, element kinds and ops are
// mixed in order with a multiply-xorshift step. Two ranks agree on a report's shape when their
// (hash, key count) agree; the reducers fold both into their one collective. (Two different
// schemas colliding needs a 64-bit hash collision, which we accept.)
#include <cstdint>
#include <string_view>

#include "headroom/core/communicator.hpp"
#include "headroom/stats/value.hpp"

namespace headroom::stats::detail {

inline constexpr std::uint64_t schema_seed = 0xcbf29ce484222325ULL;

[[nodiscard]] constexpr std::uint64_t hash_name(std::string_view name) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

/// Folds one key (its name's hash, kind and op) into a running schema hash.
[[nodiscard]] constexpr std::uint64_t hash_key(std::uint64_t h, std::uint64_t name_hash, value_kind kind,
                                               reduce_op op) noexcept {
  std::uint64_t const tag = (static_cast<std::uint64_t>(kind) << 8) | static_cast<std::uint64_t>(op);
  h = (h ^ name_hash) * 0x9e3779b97f4a7c15ULL;
  h ^= h >> 29;
  h = (h ^ tag) * 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 32);
}

}  // namespace headroom::stats::detail
