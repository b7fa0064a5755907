// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// A plan's fingerprint: one 64-bit number that ranks (or a C++ engine and its Python twin) can
// compare to agree that they hold the same plan without sending it whole.
//
//   auto const p = pool::make_plan<pool::max>(w, {.buffers = 2});
//   std::uint64_t f = pool::fingerprint(p);   // equal plans (operator==) give equal fingerprints
//
// FNV-1a 64 over every field operator== compares, each integer as 8 little-endian bytes and
// each string and list preceded by its length, so the value is the same on every platform and
// standard library. Different plans colliding needs a 64-bit hash collision.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "headroom/pool/plan.hpp"

namespace headroom::pool {

namespace detail {
class fnv1a64 {
 public:
  void add(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) byte(static_cast<unsigned char>(v >> (8 * i)));
  }
  void add(std::string_view s) noexcept {
    add(static_cast<std::uint64_t>(s.size()));
    for (char c : s) byte(static_cast<unsigned char>(c));
  }
  [[nodiscard]] std::uint64_t value() const noexcept { return h_; }

 private:
  void byte(unsigned char c) noexcept { h_ = (h_ ^ c) * 0x100000001b3ULL; }
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};
}  // namespace detail

[[nodiscard]] inline std::uint64_t fingerprint(plan const& p) noexcept {
  detail::fnv1a64 h;
  h.add(p.workload_name);
  h.add(p.planner);
  h.add(p.category_policy);
  h.add(p.padding);
  h.add(p.buffers);
  h.add(p.alignment);
  h.add(p.resident);
  h.add(p.orders.size());
  for (auto const& o : p.orders) {
    h.add(o.name);
    h.add(o.units.size());
    for (auto u : o.units) h.add(u);
  }
  h.add(p.representative_unit);
  h.add(p.shapes.size());
  for (auto const& s : p.shapes) {
    h.add(s.category);
    h.add(s.category_name);
    h.add(s.ordinal);
    h.add(s.bytes);
    h.add(s.defining_unit);
    h.add(s.defining_bucket);
  }
  h.add(p.slots.size());
  for (auto const& s : p.slots) {
    h.add(s.group);
    h.add(s.shape);
    h.add(s.offset);
    h.add(s.bytes);
  }
  h.add(p.arena_bytes);
  h.add(p.unit_names.size());
  for (auto const& n : p.unit_names) h.add(n);
  h.add(p.pooled.size());
  for (char c : p.pooled) h.add(static_cast<std::uint64_t>(c != 0));
  h.add(p.bucket_bytes.size());
  for (auto const& unit : p.bucket_bytes) {
    h.add(unit.size());
    for (auto b : unit) h.add(b);
  }
  h.add(p.bucket_shape.size());
  for (auto const& unit : p.bucket_shape) {
    h.add(unit.size());
    for (auto s : unit) h.add(s);
  }
  h.add(p.non_unit_bytes.size());
  for (auto b : p.non_unit_bytes) h.add(b);
  return h.value();
}

}  // namespace headroom::pool
