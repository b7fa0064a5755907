// SPDX-License-Identifier: Apache-2.0
// An executor over a communicator whose send / recv take arithmetic types only.
// expect: Comm is not a pipeline::byte_transport
#include <cstddef>
#include <span>
#include <type_traits>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"

namespace hp = headroom::pipeline;
using headroom::host::inline_stream;

struct arithmetic_only_comm {
  using stream_type = inline_stream;
  int rank() const { return 0; }
  int size() const { return 1; }
  void barrier(stream_type const&) {}
  template <class T> void all_reduce(std::span<T const>, std::span<T>, headroom::reduce_op, stream_type const&) {}
  template <class T> void all_gather(std::span<T const>, std::span<T>, stream_type const&) {}
  template <class T> void reduce_scatter(std::span<T const>, std::span<T>, headroom::reduce_op, stream_type const&) {}
  template <class T> void broadcast(std::span<T>, int, stream_type const&) {}
  template <class T> requires std::is_arithmetic_v<T> void send(std::span<T const>, int, stream_type const&) {}
  template <class T> requires std::is_arithmetic_v<T> void recv(std::span<T>, int, stream_type const&) {}
};
#ifdef HEADROOM_TWIN
using comm = headroom::host::thread_communicator;
#else
using comm = arithmetic_only_comm;
#endif
std::size_t size_of_executor() { return sizeof(hp::executor<comm, headroom::host::aligned_resource>); }
