// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// transport<Comm>: how the executor issues its transfers on one substrate, and how one rank's
// failure reaches the others.
//
//   begin()                                a step starts
//   post_recv(buffer, peer, s) -> ticket   at the recv's place in the list (its buffer is
//                                          allocated there, as the memory model counts)
//   wait(ticket)                           just before the computation that reads the buffer
//   send(buffer, peer, s)                  at the send's place; complete when it returns, so
//                                          the sender may release the buffer (stream-ordered)
//   batch() -> b; ...; b.end()             transfers posted between them go as one batch
//                                          (transfers::grouped); complete when end() returns.
//                                          A batch destroyed without end() is abandoned
//                                          (posting threw): nothing posted in it is waited on
//                                          by the host; NCCL still launches what was posted,
//                                          MPI cancels its sends (see pipeline/mpi.hpp)
//   all_gather(in, out, s, resource)       the executor's one check collective (host words)
//   finish(s)                              the step's closing handshake: a rank that finished
//                                          still learns of a failure elsewhere
//   abort(why)                             this rank failed: make every peer's wait throw
//
// Substrates:
//   (primary)                 every transfer at its place, in list order, wait() a no-op. Right
//                             for transfers ordered on a device stream (NCCL: the host never
//                             waits, and the issue order must match across ranks) and for any
//                             blocking point-to-point without buffering. abort() calls the
//                             communicator's abort() when it has one (NCCL: ncclCommAbort);
//                             batch() is the communicator's group_type when it has one (NCCL:
//                             nccl::group, ncclGroupStart/End), else nothing.
//   host::thread_communicator sends are buffered copies, so a receive may complete any time after
//                             its send: it is completed at its consumer, in FIFO order per peer
//                             (a consumer that needs a later message completes the earlier ones
//                             first; the lists are projections of one global order, so they
//                             arrive in that order). abort() aborts the thread_group; finish()
//                             is a barrier; a batch changes nothing (sends are buffered).
//   mpi::communicator         pipeline/mpi.hpp: MPI_Irecv posted at its place, MPI_Isend, every
//                             wait polling for an abort message; finish() is an MPI_Ibarrier; a
//                             batch's MPI_Isends are completed together at its end.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/host/stream.hpp"
#include "headroom/host/thread_group.hpp"

namespace headroom::pipeline {

/// A posted receive: its sequence number in this step and the rank it comes from.
struct transfer_ticket {
  std::size_t id = 0;
  int peer = -1;
};

namespace detail {
/// The batch of a substrate that has nothing to batch.
struct no_batch {
  void end() noexcept {}
};

/// Every transfer issued at its place in the list, in list order; see the primary transport.
template <class Comm>
class in_order_transport {
 public:
  /// Transfers complete at their place in the list: receives are not deferred.
  static constexpr bool defers_receives = false;

  explicit in_order_transport(Comm& comm) noexcept : comm_(&comm) {}

  void begin() noexcept {}
  template <class S>
  transfer_ticket post_recv(std::span<std::byte> buffer, int peer, S const& s) {
    comm_->recv(buffer, peer, s);
    return {0, peer};
  }
  void wait(transfer_ticket const&) {}
  template <class S>
  void send(std::span<std::byte const> buffer, int peer, S const& s) {
    comm_->send(buffer, peer, s);
  }
  /// The communicator's RAII group (constructed open, end() launches it), if it has one.
  [[nodiscard]] auto batch() {
    if constexpr (requires { typename Comm::group_type; }) return typename Comm::group_type{};
    else return no_batch{};
  }
  template <class S, class Resource>
  void all_gather(std::span<std::int64_t const> in, std::span<std::int64_t> out, S const& s, Resource&) {
    comm_->all_gather(in, out, s);
  }
  template <class S>
  void finish(S const&) {}
  void abort(std::string const&) noexcept {
    if constexpr (requires { comm_->abort(); }) comm_->abort();
  }

 protected:
  [[nodiscard]] Comm& comm() const noexcept { return *comm_; }

 private:
  Comm* comm_;
};
}  // namespace detail

/// The default: transfers in list order (see above). pipeline/cuda/executor.hpp specializes it
/// for device communicators (the check collective goes through device memory), pipeline/mpi.hpp
/// for MPI.
template <class Comm>
class transport : public detail::in_order_transport<Comm> {
 public:
  using detail::in_order_transport<Comm>::in_order_transport;
};

/// Thread ranks: buffered sends, receives completed at their consumer, abort through the group.
template <>
class transport<host::thread_communicator> {
 public:
  static constexpr bool defers_receives = true;

  explicit transport(host::thread_communicator& comm) noexcept : comm_(&comm) {}

  /// A new step: forget what an interrupted one left posted.
  void begin() noexcept {
    pending_.clear();
    done_.clear();
  }

  transfer_ticket post_recv(std::span<std::byte> buffer, int peer, host::inline_stream const&) {
    pending_[peer].push_back({done_.size(), buffer});
    done_.push_back(0);
    return {done_.size() - 1, peer};
  }
  void wait(transfer_ticket const& t) {
    auto& queue = pending_[t.peer];
    while (done_[t.id] == 0) {
      expects<logic_error>(!queue.empty(), "pipeline::transport: receive ", t.id, " from rank ", t.peer, " was never posted");
      auto const next = queue.front();
      comm_->recv(next.buffer, t.peer);  // FIFO per peer: the next message is the next posted receive
      queue.pop_front();
      done_[next.id] = 1;
    }
  }
  void send(std::span<std::byte const> buffer, int peer, host::inline_stream const&) { comm_->send(buffer, peer); }
  [[nodiscard]] static detail::no_batch batch() noexcept { return {}; }
  template <class Resource>
  void all_gather(std::span<std::int64_t const> in, std::span<std::int64_t> out, host::inline_stream const& s, Resource&) {
    comm_->all_gather(in, out, s);
  }
  void finish(host::inline_stream const& s) {
    for (auto const& [peer, queue] : pending_)
      expects<logic_error>(queue.empty(), "pipeline::transport: ", queue.size(), " receive(s) from rank ", peer,
                           " posted and never consumed");
    pending_.clear();
    done_.clear();
    comm_->barrier(s);
  }
  void abort(std::string const& why) noexcept { comm_->abort(why); }

 private:
  struct posted {
    std::size_t id;
    std::span<std::byte> buffer;
  };
  host::thread_communicator* comm_;
  std::map<int, std::deque<posted>> pending_;
  std::vector<char> done_;
};

}  // namespace headroom::pipeline
