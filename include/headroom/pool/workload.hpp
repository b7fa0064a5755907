// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Workload model of a fixed-address pool: an ordered list of units (the FSDP units of a model,
// in the order the engine discovers them), each a list of buckets {dtype, bytes}, plus the
// buckets that belong to no unit (embedding, final norm, output layer).
//
// A bucket's category defaults to its dtype (see policies.hpp). FP8 parameters are stored as
// raw bytes (dtype::u8), as Megatron-FSDP does, so `fp8(n)` is a u8 bucket of n bytes.
// Bucket order inside a unit is its parameter-group order; it decides ties in the planners.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/dtype.hpp"
#include "headroom/core/error.hpp"

namespace headroom::pool {

struct bucket {
  dtype type = dtype::bf16;
  std::uint64_t bytes = 0;  ///< un-padded payload; the padding policy pads it for planning
  std::string label;        ///< optional, for printing ("experts", "fp8 weights")

  friend bool operator==(bucket const&, bucket const&) = default;
};

/// A bucket of `elements` elements of `type`. Throws capacity_error when the byte count overflows.
[[nodiscard]] inline bucket elements_of(dtype type, std::uint64_t elements, std::string label = {}) {
  std::uint64_t const size = size_of(type);
  expects<capacity_error>(elements <= UINT64_MAX / size, "pool::elements_of: ", elements, " elements of ",
                          name_of(type), " overflow 64-bit bytes");
  return bucket{type, elements * size, std::move(label)};
}

/// FP8 raw data: one byte per element, stored as uint8 (Megatron's float8 -> uint8 aliasing).
[[nodiscard]] inline bucket fp8(std::uint64_t elements, std::string label = "fp8") {
  return bucket{dtype::u8, elements, std::move(label)};
}

struct unit {
  std::string name;
  std::vector<bucket> buckets;

  friend bool operator==(unit const&, unit const&) = default;
};

struct workload {
  std::string name;
  std::vector<unit> units;
  std::vector<bucket> non_unit;  ///< buckets of parameters outside every unit

  [[nodiscard]] std::uint64_t unit_bytes() const noexcept {
    std::uint64_t sum = 0;
    for (auto const& u : units)
      for (auto const& b : u.buckets) sum += b.bytes;
    return sum;
  }
  [[nodiscard]] std::uint64_t non_unit_bytes() const noexcept {
    std::uint64_t sum = 0;
    for (auto const& b : non_unit) sum += b.bytes;
    return sum;
  }

  friend bool operator==(workload const&, workload const&) = default;
};

/// The most bytes a workload (every bucket, before and after padding and alignment) may hold:
/// 2^62, so that the planners' sums, offsets and arena limits (at most 1.5x a sum) stay exact in
/// 64 bits. Far above any device (an H200 has 2^37).
inline constexpr std::uint64_t max_workload_bytes = std::uint64_t{1} << 62;

/// Throws invalid_argument naming the first problem: no units, a unit without buckets, or a
/// bucket of zero bytes (a slot must have a size; Megatron never forms empty buckets either);
/// capacity_error when the buckets together exceed max_workload_bytes.
inline void validate(workload const& w) {
  expects(!w.units.empty(), "pool: workload '", w.name, "' has no units; expected at least one unit to pool");
  for (std::size_t u = 0; u < w.units.size(); ++u) {
    auto const& un = w.units[u];
    expects(!un.buckets.empty(), "pool: unit ", u, " '", un.name, "' of workload '", w.name,
            "' has no buckets; expected at least one");
    for (std::size_t b = 0; b < un.buckets.size(); ++b)
      expects(un.buckets[b].bytes > 0, "pool: unit ", u, " '", un.name, "' bucket ", b, " (",
              name_of(un.buckets[b].type), ") has 0 bytes; expected > 0");
  }
  for (std::size_t b = 0; b < w.non_unit.size(); ++b)
    expects(w.non_unit[b].bytes > 0, "pool: non-unit bucket ", b, " (", name_of(w.non_unit[b].type),
            ") of workload '", w.name, "' has 0 bytes; expected > 0");
  std::uint64_t total = 0;
  auto add = [&](bucket const& b, std::string const& where) {
    expects<capacity_error>(b.bytes <= max_workload_bytes - total, "pool: workload '", w.name, "' exceeds ",
                            max_workload_bytes, " bytes (2^62) at ", where, " (", b.bytes, " bytes after ", total,
                            "); expected at most 2^62 bytes in all");
    total += b.bytes;
  };
  for (auto const& un : w.units)
    for (std::size_t b = 0; b < un.buckets.size(); ++b)
      add(un.buckets[b], headroom::detail::concat("unit '", un.name, "' bucket ", b));
  for (std::size_t b = 0; b < w.non_unit.size(); ++b) add(w.non_unit[b], headroom::detail::concat("non-unit bucket ", b));
}

namespace detail {
/// Adds `bytes` (padded or aligned) to `total`, refusing a workload that grows beyond
/// max_workload_bytes once its buckets are padded and aligned.
inline void add_planned_bytes(std::uint64_t& total, std::uint64_t bytes, workload const& w, char const* planner) {
  expects<capacity_error>(bytes <= max_workload_bytes - total, planner, ": workload '", w.name,
                          "' takes more than 2^62 bytes once padded and aligned (", total, " + ", bytes,
                          "); expected at most 2^62");
  total += bytes;
}
}  // namespace detail

}  // namespace headroom::pool
