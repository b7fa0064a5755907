// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// counting_communicator<C>: a decorator that forwards every call to a communicator and counts
// it. Tests use it to assert "exactly one collective per step" or "no collective at all"; a
// trainer can use it to watch how many collectives its logging costs.
#include <cstddef>
#include <span>

#include "headroom/core/communicator.hpp"

namespace headroom::stats {

struct communication_counts {
  std::size_t all_reduce = 0;
  std::size_t all_gather = 0;
  std::size_t reduce_scatter = 0;
  std::size_t broadcast = 0;
  std::size_t send = 0;
  std::size_t recv = 0;
  std::size_t barrier = 0;
  mutable std::size_t size_queries = 0;  // size() calls: PR #3645's tests check it is not even asked
  [[nodiscard]] std::size_t collectives() const noexcept {
    return all_reduce + all_gather + reduce_scatter + broadcast + barrier;
  }
};

template <communicator C>
class counting_communicator {
 public:
  using stream_type = typename C::stream_type;
  static constexpr bool accepts_host_buffers = requires { requires C::accepts_host_buffers; };

  /// Wraps `inner`, which must outlive the decorator.
  explicit counting_communicator(C& inner) noexcept : inner_(&inner) {}

  [[nodiscard]] int rank() const { return inner_->rank(); }
  [[nodiscard]] int size() const {
    ++counts_.size_queries;
    return inner_->size();
  }
  template <class T>
  void all_reduce(std::span<T const> in, std::span<T> out, reduce_op op, stream_type const& s) {
    ++counts_.all_reduce;
    last_reduce_op_ = op;
    inner_->all_reduce(in, out, op, s);
  }
  template <class T>
  void all_gather(std::span<T const> in, std::span<T> out, stream_type const& s) {
    ++counts_.all_gather;
    inner_->all_gather(in, out, s);
  }
  template <class T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, reduce_op op, stream_type const& s) {
    ++counts_.reduce_scatter;
    inner_->reduce_scatter(in, out, op, s);
  }
  template <class T>
  void broadcast(std::span<T> buf, int root, stream_type const& s) {
    ++counts_.broadcast;
    inner_->broadcast(buf, root, s);
  }
  template <class T>
  void send(std::span<T const> buf, int peer, stream_type const& s) {
    ++counts_.send;
    inner_->send(buf, peer, s);
  }
  template <class T>
  void recv(std::span<T> buf, int peer, stream_type const& s) {
    ++counts_.recv;
    inner_->recv(buf, peer, s);
  }
  void barrier(stream_type const& s) {
    ++counts_.barrier;
    inner_->barrier(s);
  }

  [[nodiscard]] communication_counts const& counts() const noexcept { return counts_; }
  [[nodiscard]] reduce_op last_reduce_op() const noexcept { return last_reduce_op_; }
  [[nodiscard]] C& inner() const noexcept { return *inner_; }

 private:
  C* inner_;
  communication_counts counts_;
  reduce_op last_reduce_op_ = reduce_op::sum;
};

}  // namespace headroom::stats
