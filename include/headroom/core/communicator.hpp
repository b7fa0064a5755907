// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// A communicator is one rank's handle on a group. Collectives are called by every rank of
// the group in the same order with matching sizes, element types and ops; buffers live where
// the communicator's substrate expects them (host memory for thread_group and MPI, device
// memory for NCCL). All calls are ordered on the given stream.
//
//   all_reduce(in, out, op, s)       in.size() == out.size(); in == out allowed
//   all_gather(in, out, s)           out.size() == in.size() * size(), rank-major
//   reduce_scatter(in, out, op, s)   in.size() == out.size() * size(); rank r gets block r
//   broadcast(buf, root, s)          root's buf copied to every rank
//   send(buf, peer, s) / recv(buf, peer, s)
//   barrier(s)
#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>

#include "headroom/core/stream.hpp"

namespace headroom {

enum class reduce_op : std::uint8_t { sum, max, min };

[[nodiscard]] constexpr std::string_view name_of(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
  }
  return "?";
}

namespace detail {
template <class C, class T>
concept communicates = requires(C& c, typename C::stream_type const& s, std::span<T const> in, std::span<T> out,
                                reduce_op op, int peer) {
  c.all_reduce(in, out, op, s);
  c.all_gather(in, out, s);
  c.reduce_scatter(in, out, op, s);
  c.broadcast(out, peer, s);
  c.send(in, peer, s);
  c.recv(out, peer, s);
};
}  // namespace detail

template <class C>
concept communicator = stream<typename C::stream_type> && requires(C& c, C const& cc, typename C::stream_type const& s) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  c.barrier(s);
} && detail::communicates<C, std::int32_t> && detail::communicates<C, std::int64_t> &&
    detail::communicates<C, float> && detail::communicates<C, double>;

}  // namespace headroom
