// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::nccl::communicator: one rank of an NCCL communicator (owning, move-only), modelling
// headroom::communicator with stream_type = cuda::stream_view and device buffers.
//
// Every call checks its arguments before NCCL sees them and throws invalid_argument naming the
// bad values: sizes against the contract of core/communicator.hpp, root and peer ranges,
// null data with a non-zero count, partly overlapping in/out buffers (exact in-place layouts
// are allowed), and the legacy default stream. A rank that throws here has issued nothing, so
// it never leaves a half-started collective behind. What cannot be checked locally (the other
// ranks' sizes, types and ops) is NCCL's contract: a mismatch hangs or corrupts, as in NCCL.
//
// All calls are stream-ordered: they enqueue work on `s` and return. The stream must belong to
// the communicator's device. barrier(s) orders `s` after every rank reached the barrier in its
// own stream; the host does not wait (synchronize `s` for a host-side barrier).
//
// send/recv follow NCCL: a send blocks (on the device) until the peer posts the matching recv,
// so two ranks exchanging must either order their calls or issue both inside a `group`
// (sendrecv does that). A send to oneself needs a group too.
//
// Failure handling: NCCL failures throw nccl_error with NCCL's texts (see check.hpp).
// check_async() polls ncclCommGetAsyncError. abort() calls ncclCommAbort: kernels of this
// communicator in flight stop, and every later call on it (but rank, size, device) throws
// group_aborted without touching NCCL. abort() may be called from another thread (it is what
// launch_per_device does when a rank fails); it is a last resort: NCCL frees the communicator,
// so a call racing with it on another thread is undefined.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/check.hpp"
#include "headroom/nccl/group.hpp"
#include "headroom/nccl/mem_resource.hpp"
#include "headroom/nccl/types.hpp"

namespace headroom::nccl {

namespace detail {

/// Shared by a communicator and the registrations made on it, so a registration never outlives
/// the ncclComm_t it refers to.
struct comm_state {
  ncclComm_t comm = nullptr;
  bool owned = true;
  int rank = 0;
  int size = 0;
  int device = 0;
  std::atomic<bool> dead{false};  // aborted or destroyed: NCCL must not see `comm` again
  std::atomic<bool> aborted{false};
  void* barrier_scratch = nullptr;  // 4 bytes of device memory, allocated by the first barrier

  comm_state(ncclComm_t c, bool o) noexcept : comm(c), owned(o) {}
  comm_state(comm_state const&) = delete;
  comm_state& operator=(comm_state const&) = delete;
  ~comm_state() {
    if (owned && !dead.exchange(true)) HEADROOM_NCCL_TRY_NOTHROW(ncclCommDestroy(comm), nullptr);
    if (barrier_scratch != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaFree(barrier_scratch));
  }

  void abort() noexcept {
    aborted.store(true);
    if (!dead.exchange(true)) HEADROOM_NCCL_TRY_NOTHROW(ncclCommAbort(comm), nullptr);
  }
};

[[nodiscard]] inline bool ranges_overlap(void const* a, std::size_t a_bytes, void const* b, std::size_t b_bytes) noexcept {
  auto const x = reinterpret_cast<std::uintptr_t>(a);
  auto const y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace detail

/// A buffer registered with a communicator (ncclCommRegister); deregistered on destruction.
/// Keeps the communicator's NCCL handle alive until then. Move-only.
class registration {
 public:
  registration() noexcept = default;
  registration(registration&& o) noexcept
      : state_(std::move(o.state_)), handle_(std::exchange(o.handle_, nullptr)), data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  registration& operator=(registration&& o) noexcept {
    if (this != &o) {
      reset();
      state_ = std::move(o.state_);
      handle_ = std::exchange(o.handle_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  registration(registration const&) = delete;
  registration& operator=(registration const&) = delete;
  ~registration() { reset(); }

  /// Deregisters now (a no-op on an aborted communicator, whose registrations died with it).
  /// NCCL may hand back a null handle (local registration disabled); there is nothing to undo then.
  void reset() noexcept {
    if (state_ && handle_ != nullptr && !state_->dead.load())
      HEADROOM_NCCL_TRY_NOTHROW(ncclCommDeregister(state_->comm, handle_), state_->comm);
    state_.reset();
    handle_ = nullptr;
    data_ = nullptr;
    bytes_ = 0;
  }

  /// True from register_buffer until reset(), destruction or a move away.
  [[nodiscard]] bool active() const noexcept { return state_ != nullptr; }
  [[nodiscard]] void* handle() const noexcept { return handle_; }
  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  friend class communicator;
  registration(std::shared_ptr<detail::comm_state> state, void* handle, void* data, std::size_t bytes) noexcept
      : state_(std::move(state)), handle_(handle), data_(data), bytes_(bytes) {}

  std::shared_ptr<detail::comm_state> state_;
  void* handle_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class communicator {
 public:
  using stream_type = cuda::stream_view;
  /// split() color for ranks that join no new communicator (they get an empty one).
  static constexpr int no_color = NCCL_SPLIT_NOCOLOR;

  /// An empty communicator (valid() is false); every call but valid() throws logic_error.
  communicator() noexcept = default;

  /// Takes ownership of `comm` (ncclCommDestroy on destruction). Queries rank, size, device.
  [[nodiscard]] static communicator adopt(ncclComm_t comm) { return communicator(comm, true); }
  /// Wraps `comm` without owning it; it must outlive this object and its registrations.
  [[nodiscard]] static communicator view(ncclComm_t comm) { return communicator(comm, false); }

  /// ncclCommInitRank(Config) for rank `rank` of `nranks` on `device`. Collective: every rank of
  /// the new communicator must call it (from its own thread or process) with the same `id`.
  [[nodiscard]] static communicator init_rank(ncclUniqueId const& id, int nranks, int rank, int device,
                                              ncclConfig_t* config = nullptr) {
    expects(nranks >= 1, "nccl::communicator::init_rank: nranks ", nranks, " must be >= 1");
    expects(rank >= 0 && rank < nranks, "nccl::communicator::init_rank: rank ", rank, " out of range [0, ", nranks, ")");
    cuda::scoped_device on_device(device);
    ncclComm_t comm = nullptr;
    if (config != nullptr)
      HEADROOM_NCCL_TRY(ncclCommInitRankConfig(&comm, nranks, id, rank, config));
    else
      HEADROOM_NCCL_TRY(ncclCommInitRank(&comm, nranks, id, rank));
    return adopt(comm);
  }

  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  communicator(communicator const&) = delete;
  communicator& operator=(communicator const&) = delete;
  ~communicator() = default;  // the shared state destroys the NCCL communicator

  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }
  [[nodiscard]] bool aborted() const noexcept { return state_ && state_->aborted.load(); }

  // rank, size and device stay readable after abort() (for error reports); the rest throws.
  [[nodiscard]] int rank() const { return held("rank").rank; }
  [[nodiscard]] int size() const { return held("size").size; }
  /// The CUDA device of this rank.
  [[nodiscard]] int device() const { return held("device").device; }
  /// The raw handle, for NCCL calls headroom does not wrap. Do not destroy it.
  [[nodiscard]] ncclComm_t get() const { return live("get").comm; }

  // ---- collectives -------------------------------------------------------------------------

  /// out[i] = op over ranks of in[i]. in.size() == out.size(); in == out (same data) allowed.
  template <class T>
  void all_reduce(std::span<std::type_identity_t<T> const> in, std::span<T> out, reduce_op op, stream_type const& s) {
    static_assert(reducible_v<T>, "nccl::communicator::all_reduce: element type cannot be reduced");
    auto& st = live("all_reduce");
    cuda::require_stream(s, "nccl::communicator::all_reduce");
    expects(in.size() == out.size(), "nccl::communicator::all_reduce: in has ", in.size(), " elements, out has ",
            out.size(), "; expected equal sizes");
    check_data("all_reduce", "in", in.data(), in.size());
    check_data("all_reduce", "out", out.data(), out.size());
    check_in_place("all_reduce", in.data(), in.size_bytes(), out.data(), out.size_bytes(), in.data() == out.data());
    ncclRedOp_t const nop = to_nccl(op);
    HEADROOM_NCCL_TRY(ncclAllReduce(in.data(), out.data(), in.size(), datatype_v<T>, nop, st.comm, s.get()), st.comm);
  }

  /// out = concatenation of every rank's in, in rank order. out.size() == in.size() * size().
  /// In place when in is block rank() of out.
  template <class T>
  void all_gather(std::span<std::type_identity_t<T> const> in, std::span<T> out, stream_type const& s) {
    auto& st = live("all_gather");
    cuda::require_stream(s, "nccl::communicator::all_gather");
    auto const n = static_cast<std::size_t>(st.size);
    expects(out.size() == in.size() * n, "nccl::communicator::all_gather: out has ", out.size(),
            " elements; expected in.size() * size() = ", in.size(), " * ", n, " = ", in.size() * n);
    check_data("all_gather", "in", in.data(), in.size());
    check_data("all_gather", "out", out.data(), out.size());
    check_in_place("all_gather", in.data(), in.size_bytes(), out.data(), out.size_bytes(),
                   in.data() == out.data() + static_cast<std::size_t>(st.rank) * in.size());
    HEADROOM_NCCL_TRY(ncclAllGather(in.data(), out.data(), in.size(), datatype_v<T>, st.comm, s.get()), st.comm);
  }

  /// Rank r gets block r of the op over ranks of in. in.size() == out.size() * size().
  /// In place when out is block rank() of in.
  template <class T>
  void reduce_scatter(std::span<std::type_identity_t<T> const> in, std::span<T> out, reduce_op op, stream_type const& s) {
    static_assert(reducible_v<T>, "nccl::communicator::reduce_scatter: element type cannot be reduced");
    auto& st = live("reduce_scatter");
    cuda::require_stream(s, "nccl::communicator::reduce_scatter");
    auto const n = static_cast<std::size_t>(st.size);
    expects(in.size() == out.size() * n, "nccl::communicator::reduce_scatter: in has ", in.size(),
            " elements; expected out.size() * size() = ", out.size(), " * ", n, " = ", out.size() * n);
    check_data("reduce_scatter", "in", in.data(), in.size());
    check_data("reduce_scatter", "out", out.data(), out.size());
    check_in_place("reduce_scatter", in.data(), in.size_bytes(), out.data(), out.size_bytes(),
                   out.data() == in.data() + static_cast<std::size_t>(st.rank) * out.size());
    ncclRedOp_t const nop = to_nccl(op);
    HEADROOM_NCCL_TRY(ncclReduceScatter(in.data(), out.data(), out.size(), datatype_v<T>, nop, st.comm, s.get()),
                      st.comm);
  }

  /// Copies root's buffer to every rank (in place).
  template <class T>
  void broadcast(std::span<T> buffer, int root, stream_type const& s) {
    static_assert(!std::is_const_v<T>, "nccl::communicator::broadcast: buffer must be writable");
    auto& st = live("broadcast");
    cuda::require_stream(s, "nccl::communicator::broadcast");
    check_rank("broadcast", "root", root, st.size);
    check_data("broadcast", "buffer", buffer.data(), buffer.size());
    HEADROOM_NCCL_TRY(
        ncclBroadcast(buffer.data(), buffer.data(), buffer.size(), datatype_v<T>, root, st.comm, s.get()), st.comm);
  }

  /// The RAII batch of point-to-point calls (ncclGroupStart on construction, ncclGroupEnd at
  /// end()): what pipeline::transfers::grouped issues a run of transfers in.
  using group_type = nccl::group;

  template <class T>
  void send(std::span<T const> data, int peer, stream_type const& s) {
    auto& st = live("send");
    cuda::require_stream(s, "nccl::communicator::send");
    check_rank("send", "peer", peer, st.size);
    check_data("send", "data", data.data(), data.size());
    HEADROOM_NCCL_TRY(ncclSend(data.data(), data.size(), datatype_v<T>, peer, st.comm, s.get()), st.comm);
  }
  template <class T>
    requires(!std::is_const_v<T>)
  void send(std::span<T> data, int peer, stream_type const& s) {
    send(std::span<T const>(data), peer, s);
  }

  /// Receives exactly data.size() elements from `peer` (the sender's count must match).
  template <class T>
  void recv(std::span<T> data, int peer, stream_type const& s) {
    static_assert(!std::is_const_v<T>, "nccl::communicator::recv: buffer must be writable");
    auto& st = live("recv");
    cuda::require_stream(s, "nccl::communicator::recv");
    check_rank("recv", "peer", peer, st.size);
    check_data("recv", "data", data.data(), data.size());
    HEADROOM_NCCL_TRY(ncclRecv(data.data(), data.size(), datatype_v<T>, peer, st.comm, s.get()), st.comm);
  }

  /// Sends `out` to `dst` and receives `in` from `src` in one group (no ordering deadlock).
  template <class T>
  void sendrecv(std::span<std::type_identity_t<T> const> out, int dst, std::span<T> in, int src, stream_type const& s) {
    auto& st = live("sendrecv");
    cuda::require_stream(s, "nccl::communicator::sendrecv");
    check_rank("sendrecv", "dst", dst, st.size);
    check_rank("sendrecv", "src", src, st.size);
    check_data("sendrecv", "out", out.data(), out.size());
    check_data("sendrecv", "in", in.data(), in.size());
    group g;
    HEADROOM_NCCL_TRY(ncclSend(out.data(), out.size(), datatype_v<T>, dst, st.comm, s.get()), st.comm);
    HEADROOM_NCCL_TRY(ncclRecv(in.data(), in.size(), datatype_v<T>, src, st.comm, s.get()), st.comm);
    g.end();
  }

  /// A one-element all_reduce: `s` continues only after every rank's stream reached this point.
  void barrier(stream_type const& s) {
    auto& st = live("barrier");
    cuda::require_stream(s, "nccl::communicator::barrier");
    if (st.barrier_scratch == nullptr) {
      cuda::scoped_device on_device(st.device);
      void* p = nullptr;
      HEADROOM_CUDA_TRY(cudaMalloc(&p, sizeof(std::uint32_t)));
      cudaError_t const status = cudaMemset(p, 0, sizeof(std::uint32_t));
      if (status != cudaSuccess) {
        HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p));
        HEADROOM_CUDA_TRY(status);
      }
      st.barrier_scratch = p;
    }
    HEADROOM_NCCL_TRY(ncclAllReduce(st.barrier_scratch, st.barrier_scratch, 1, ncclUint32, ncclSum, st.comm, s.get()),
                      st.comm);
  }

  // ---- management --------------------------------------------------------------------------

  /// ncclCommGetAsyncError, raw: ncclSuccess, ncclInProgress, or the error.
  [[nodiscard]] ncclResult_t async_error() const {
    auto& st = live("async_error");
    ncclResult_t async = ncclSuccess;
    HEADROOM_NCCL_TRY(ncclCommGetAsyncError(st.comm, &async), st.comm);
    return async;
  }

  /// Throws nccl_error if the communicator reports an asynchronous error (e.g. a peer failed
  /// or a network error); the communicator must then be aborted.
  void check_async() const {
    auto& st = live("check_async");
    ncclResult_t const async = async_error();
    if (async != ncclSuccess && async != ncclInProgress) {
      char const* last = ncclGetLastError(st.comm);
      throw nccl_error(headroom::detail::concat("nccl::communicator: asynchronous error on rank ", st.rank, " of ",
                                                st.size, ": ", ncclGetErrorString(async),
                                                "; NCCL last error: ", last != nullptr ? last : ""));
    }
  }

  /// ncclCommAbort: stops this communicator's work in flight and frees it. Later calls throw
  /// group_aborted. Safe to call more than once, or on an empty communicator (no-op).
  void abort() noexcept {
    if (state_) state_->abort();
  }

  /// ncclCommFinalize: flushes outstanding operations (blocking until the communicator is
  /// quiescent on every rank). Destruction after finalize only frees local resources.
  void finalize() {
    auto& st = live("finalize");
    cuda::scoped_device on_device(st.device);
    HEADROOM_NCCL_TRY(ncclCommFinalize(st.comm), st.comm);
  }

  /// ncclCommSplit. Collective over this communicator: ranks passing the same `color` (>= 0)
  /// form a new communicator, ordered by (key, rank); ranks passing no_color get an empty one.
  [[nodiscard]] communicator split(int color, int key) {
    auto& st = live("split");
    expects(color >= 0 || color == no_color, "nccl::communicator::split: color ", color,
            " must be >= 0 or no_color (", no_color, ")");
    cuda::scoped_device on_device(st.device);
    ncclComm_t child = nullptr;
    HEADROOM_NCCL_TRY(ncclCommSplit(st.comm, color, key, &child, nullptr), st.comm);
    if (child == nullptr) return communicator{};
    return adopt(child);
  }

  /// Registers [ptr, ptr + bytes) for zero-copy / user-buffer paths (ncclCommRegister).
  /// Memory from nccl_mem_resource qualifies for every path; cudaMalloc memory for some.
  [[nodiscard]] registration register_buffer(void* ptr, std::size_t bytes) {
    auto& st = live("register_buffer");
    expects(ptr != nullptr && bytes > 0, "nccl::communicator::register_buffer: expected a non-null buffer of >0 bytes, got ",
            ptr, " and ", bytes, " bytes");
    cuda::scoped_device on_device(st.device);
    void* handle = nullptr;
    HEADROOM_NCCL_TRY(ncclCommRegister(st.comm, ptr, bytes, &handle), st.comm);
    return registration(state_, handle, ptr, bytes);
  }
  template <class T>
  [[nodiscard]] registration register_buffer(std::span<T> buffer) {
    return register_buffer(const_cast<void*>(static_cast<void const*>(buffer.data())), buffer.size_bytes());
  }

  /// Communicators compare equal when they are the same rank of the same NCCL communicator.
  friend bool operator==(communicator const& a, communicator const& b) noexcept { return a.state_ == b.state_; }

 private:
  communicator(ncclComm_t comm, bool owned) {
    expects(comm != nullptr, "nccl::communicator: null ncclComm_t");
    state_ = std::make_shared<detail::comm_state>(comm, owned);  // owns it from here on
    HEADROOM_NCCL_TRY(ncclCommUserRank(comm, &state_->rank), comm);
    HEADROOM_NCCL_TRY(ncclCommCount(comm, &state_->size), comm);
    HEADROOM_NCCL_TRY(ncclCommCuDevice(comm, &state_->device), comm);
  }

  detail::comm_state& held(char const* what) const {
    expects<logic_error>(state_ != nullptr, "nccl::communicator::", what,
                         ": empty communicator (default-constructed, moved from, or a no_color split)");
    return *state_;
  }
  detail::comm_state& live(char const* what) const {
    held(what);
    if (state_->aborted.load())
      throw group_aborted(headroom::detail::concat("nccl::communicator::", what, ": rank ", state_->rank,
                                                   " was aborted (ncclCommAbort)"));
    return *state_;
  }

  static void check_rank(char const* what, char const* name, int r, int size) {
    expects(r >= 0 && r < size, "nccl::communicator::", what, ": ", name, " ", r, " out of range [0, ", size, ")");
  }
  static void check_data(char const* what, char const* name, void const* p, std::size_t count) {
    expects(p != nullptr || count == 0, "nccl::communicator::", what, ": ", name, " is null with ", count, " elements");
  }
  static void check_in_place(char const* what, void const* in, std::size_t in_bytes, void const* out,
                             std::size_t out_bytes, bool exact_in_place) {
    expects(exact_in_place || !detail::ranges_overlap(in, in_bytes, out, out_bytes), "nccl::communicator::", what,
            ": in [", in, ", +", in_bytes, " B) and out [", out, ", +", out_bytes,
            " B) overlap without being the in-place layout");
  }

  std::shared_ptr<detail::comm_state> state_;
};
static_assert(headroom::communicator<communicator>);
static_assert(!std::copyable<communicator> && std::movable<communicator>);

}  // namespace headroom::nccl
