// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The pipeline executor over MPI processes: non-blocking transfers and an abort path.
// Include this header wherever an executor over mpi::communicator is built (it specializes the
// executor's transport; without it the executor falls back to blocking MPI_Send / MPI_Recv in
// list order, with no way to tell peers of a failure).
//
//   receives   MPI_Irecv posted at the recv's place in the list (its buffer is allocated there,
//              as the memory model counts), waited on just before the computation that reads it
//   sends      MPI_Isend at the send's place, completed before the buffer is released; in a
//              batch (transfers::grouped) the run's MPI_Isends are completed together at its end
//   waits      MPI_Test in a loop that also probes for an abort message from any rank, backing
//              off to short sleeps so that oversubscribed ranks leave the CPU to the others
//   abort      the failing rank cancels its posted receives and sends a short abort message (its
//              error text) to every other rank; their next wait throws group_aborted with it
//   finish     each step ends with an MPI_Ibarrier waited the same way, so a rank that had
//              finished its actions still learns of a failure elsewhere
//
// Transfers use their own tags on the communicator's private duplicate. After an abort the
// communicator is spent for pipelining: unmatched messages may remain on it.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/host/stream.hpp"
#include "headroom/mpi/communicator.hpp"
#include "headroom/pipeline/executor.hpp"
#include "headroom/pipeline/transport.hpp"

namespace headroom::pipeline {

template <>
class transport<mpi::communicator> {
 public:
  static constexpr bool defers_receives = true;
  static constexpr int data_tag = 0x5050;   // "PP": activations and gradients
  static constexpr int abort_tag = 0x5041;  // "PA": a rank's failure, as text

  explicit transport(mpi::communicator& comm) noexcept : comm_(&comm) {}
  transport(transport&&) noexcept = default;
  transport& operator=(transport&&) noexcept = default;
  transport(transport const&) = delete;
  transport& operator=(transport const&) = delete;
  ~transport() {
    cancel_sends();
    cancel_receives();
  }

  void begin() noexcept {
    cancel_sends();
    cancel_receives();
  }

  /// A run of transfers posted together: sends are not completed one by one but at end().
  class batch_scope {
   public:
    explicit batch_scope(transport& t) noexcept : t_(&t) { t.batching_ = true; }
    batch_scope(batch_scope const&) = delete;
    batch_scope& operator=(batch_scope const&) = delete;
    ~batch_scope() {
      if (t_->batching_) t_->cancel_sends();  // posting threw: nothing of the batch is waited on
    }
    /// Completes the batch's sends (polling for an abort meanwhile, as every wait does).
    void end() { t_->complete_sends(); }

   private:
    transport* t_;
  };
  [[nodiscard]] batch_scope batch() noexcept { return batch_scope(*this); }

  transfer_ticket post_recv(std::span<std::byte> buffer, int peer, host::inline_stream const&) {
    MPI_Request request = MPI_REQUEST_NULL;
    HEADROOM_MPI_TRY(MPI_Irecv(buffer.data(), count("receive", buffer.size()), MPI_BYTE, peer, data_tag, comm_->get(), &request));
    receives_.push_back({request, buffer.size(), peer});
    return {receives_.size() - 1, peer};
  }

  void wait(transfer_ticket const& t) {
    auto& r = receives_[t.id];
    MPI_Status status{};
    complete(r.request, &status, false);
    int got = 0;
    HEADROOM_MPI_TRY(MPI_Get_count(&status, MPI_BYTE, &got));
    expects<collective_mismatch>(static_cast<std::size_t>(got) == r.bytes, "pipeline::transport<mpi>: rank ",
                                 comm_->rank(), " expected ", r.bytes, " bytes from rank ", r.peer, ", got ", got);
  }

  void send(std::span<std::byte const> buffer, int peer, host::inline_stream const&) {
    MPI_Request request = MPI_REQUEST_NULL;
    HEADROOM_MPI_TRY(MPI_Isend(buffer.data(), count("send", buffer.size()), MPI_BYTE, peer, data_tag, comm_->get(), &request));
    if (batching_) {
      sends_.push_back(request);
      return;
    }
    complete(request, MPI_STATUS_IGNORE, true);
  }

  template <class Resource>
  void all_gather(std::span<std::int64_t const> in, std::span<std::int64_t> out, host::inline_stream const& s, Resource&) {
    comm_->all_gather(in, out, s);
  }

  void finish(host::inline_stream const&) {
    MPI_Request request = MPI_REQUEST_NULL;
    HEADROOM_MPI_TRY(MPI_Ibarrier(comm_->get(), &request));
    complete(request, MPI_STATUS_IGNORE, false);
    receives_.clear();
  }

  void abort(std::string const& why) noexcept {
    cancel_sends();
    cancel_receives();
    int const me = comm_->rank();
    int const n = comm_->size();
    MPI_Comm const c = comm_->get();
    int const length = static_cast<int>(std::min<std::size_t>(why.size(), 4096));
    std::vector<MPI_Request> sends;
    try {
      sends.reserve(static_cast<std::size_t>(n));
    } catch (...) {
      return;  // no memory to tell them: the peers see a failure of their own later
    }
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      MPI_Request request = MPI_REQUEST_NULL;
      if (MPI_Isend(why.data(), length, MPI_CHAR, r, abort_tag, c, &request) == MPI_SUCCESS) sends.push_back(request);
    }
    // Short messages leave at once (eager); give the rest a second, then stop waiting for them.
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (;;) {
      int done = 0;
      if (MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || done) break;
      if (std::chrono::steady_clock::now() > deadline) {
        for (auto& request : sends)
          if (request != MPI_REQUEST_NULL) {
            MPI_Cancel(&request);
            MPI_Request_free(&request);
          }
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  struct posted {
    MPI_Request request;
    std::size_t bytes;
    int peer;
  };

  static int count(char const* what, std::size_t bytes) {
    expects<capacity_error>(bytes <= static_cast<std::size_t>(INT_MAX), "pipeline::transport<mpi>: a ", what, " of ", bytes,
                            " bytes exceeds MPI's int count limit ", INT_MAX);
    return static_cast<int>(bytes);
  }

  // Completes `request`, polling for an abort message from any rank meanwhile.
  void complete(MPI_Request& request, MPI_Status* status, bool is_send) {
    MPI_Comm const c = comm_->get();
    for (long spins = 0;; ++spins) {
      int done = 0;
      HEADROOM_MPI_TRY(MPI_Test(&request, &done, status));
      if (done) return;
      int flag = 0;
      MPI_Status probe{};
      HEADROOM_MPI_TRY(MPI_Iprobe(MPI_ANY_SOURCE, abort_tag, c, &flag, &probe));
      if (flag) {
        int length = 0;
        HEADROOM_MPI_TRY(MPI_Get_count(&probe, MPI_CHAR, &length));
        std::string why(static_cast<std::size_t>(length), '\0');
        HEADROOM_MPI_TRY(MPI_Recv(why.data(), length, MPI_CHAR, probe.MPI_SOURCE, abort_tag, c, MPI_STATUS_IGNORE));
        if (is_send) cancel_send(request);
        cancel_receives();  // before the buffers they write into are freed by the unwinding
        throw group_aborted(headroom::detail::concat("rank ", probe.MPI_SOURCE, " aborted the pipeline step: ", why));
      }
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(spins > 4096 ? 200 : 20));
    }
  }

  void complete_sends() {
    batching_ = false;
    try {
      for (auto& request : sends_) complete(request, MPI_STATUS_IGNORE, true);
    } catch (...) {
      cancel_sends();  // the ones not yet complete, before the unwinding frees their buffers
      throw;
    }
    sends_.clear();
  }
  void cancel_sends() noexcept {
    batching_ = false;
    for (auto& request : sends_) cancel_send(request);
    sends_.clear();
  }
  // Cancels a send and waits up to a second for it to complete (cancelled, or delivered), so that
  // its buffer is no longer read when the unwinding frees it. A send the peer has already matched
  // cannot be cancelled; if a failed peer never takes it, the request is freed after the second
  // and MPI may still read the buffer (only ever after an abort; MPI offers no way to stop it).
  static void cancel_send(MPI_Request& request) noexcept {
    if (request == MPI_REQUEST_NULL) return;
    MPI_Cancel(&request);
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (int done = 0; MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done;) {
      if (std::chrono::steady_clock::now() > deadline) {
        MPI_Request_free(&request);
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void cancel_receives() noexcept {
    for (auto& r : receives_)
      if (r.request != MPI_REQUEST_NULL) {
        MPI_Cancel(&r.request);
        MPI_Wait(&r.request, MPI_STATUS_IGNORE);  // a cancelled receive completes at once
      }
    receives_.clear();
  }

  mpi::communicator* comm_;
  std::vector<posted> receives_;
  std::vector<MPI_Request> sends_;  // a batch's sends, completed at its end
  bool batching_ = false;
};

}  // namespace headroom::pipeline
