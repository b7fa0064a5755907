#pragma once
// The schema of a report, hashed: FNV-1a 64 over every key's name, element kind and op, in
// order. Two ranks agree on a report's shape when their (hash, key count) agree; the reducers
// fold both into their one collective. (A collision of two different schemas needs a 64-bit
// FNV collision between key lists, which we accept.)
#include <cstdint>
#include <string_view>

#include "headroom/core/communicator.hpp"
#include "headroom/stats/value.hpp"

namespace headroom::stats::detail {

inline constexpr std::uint64_t fnv_offset = 0xcbf29ce484222325ULL;
inline constexpr std::uint64_t fnv_prime = 0x100000001b3ULL;

[[nodiscard]] constexpr std::uint64_t fnv_byte(std::uint64_t h, unsigned char c) noexcept { return (h ^ c) * fnv_prime; }

/// Folds one key into a running schema hash.
[[nodiscard]] constexpr std::uint64_t hash_key(std::uint64_t h, std::string_view name, value_kind kind,
                                               reduce_op op) noexcept {
  for (char c : name) h = fnv_byte(h, static_cast<unsigned char>(c));
  h = fnv_byte(h, 0);  // separator: {"ab","c"} and {"a","bc"} differ
  h = fnv_byte(h, static_cast<unsigned char>(kind));
  return fnv_byte(h, static_cast<unsigned char>(op));
}

}  // namespace headroom::stats::detail
