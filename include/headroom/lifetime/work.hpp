// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Asynchronous collectives over guarded buffers, for any headroom communicator (NCCL on device
// memory, thread_group and MPI on host memory).
//
//   auto work = lifetime::all_reduce_async<float>(comm, grad, reduce_op::sum, compute, comm_stream);
//   ...                       // compute keeps going; comm_stream runs the all-reduce
//   work.wait(compute);       // compute waits for the result on the device; the host does not
//
// Each call (1) makes `comm_stream` wait for the work already issued to `caller` (the producer of
// the inputs), (2) issues the collective on `comm_stream`, (3) records a use on `comm_stream` in
// every guard it touched, and (4) records a completion event. A guard passed as an rvalue is
// stashed in the returned work handle and released (with its own policy) by wait(); a guard
// passed as an lvalue stays with the caller, which now knows the comm stream used it. This is
// PyTorch's ProcessGroupNCCL after #150398: inputs are stashed on the host until wait(), and the
// streams are ordered explicitly instead of calling record_stream.
//
// On the host substrate the collective runs inline (the streams are inline), and the handle has
// the same API, so code written against it runs unchanged on a CPU-only machine.
//
// Local arguments (empty or released guards, sizes that are not a multiple of the element size)
// throw before anything is issued. Shapes that disagree across ranks are the communicator's to
// detect (thread_group throws collective_mismatch on every rank).
#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/lifetime/guard.hpp"

namespace headroom::lifetime {

/// The handle of an issued collective: owns the stashed input guards and a completion event.
/// Move-only. Destroying it without wait() still releases the stash safely (each guard's
/// release is ordered after the collective, because each recorded its use on the comm stream).
template <class Guard>
  requires is_guard_v<Guard>
class collective_work {
 public:
  using guard_type = Guard;
  using stream_type = typename Guard::stream_type;
  using event_type = typename Guard::event_type;

  /// An empty handle (nothing issued): wait() and synchronize() throw logic_error.
  collective_work() = default;
  collective_work(event_type done, std::vector<Guard> stash)
      : done_(std::move(done)), stash_(std::move(stash)), valid_(true) {}

  collective_work(collective_work&& o) noexcept
      : done_(std::move(o.done_)), stash_(std::move(o.stash_)), valid_(std::exchange(o.valid_, false)) {
    o.stash_.clear();
  }
  collective_work& operator=(collective_work&& o) noexcept {
    if (this != &o) {
      stash_.clear();  // guards release themselves, ordered after their own collective
      done_ = std::move(o.done_);
      stash_ = std::move(o.stash_);
      o.stash_.clear();
      valid_ = std::exchange(o.valid_, false);
    }
    return *this;
  }
  collective_work(collective_work const&) = delete;
  collective_work& operator=(collective_work const&) = delete;
  ~collective_work() = default;

  /// Orders work issued to `s` after the collective (device-side; the host does not block),
  /// then releases the stashed guards. May be called for several streams.
  void wait(stream_type const& s) {
    require_valid("wait");
    done_.wait_on(s);
    release_stash();
  }
  /// The host waits for the collective, then releases the stashed guards.
  void synchronize() {
    require_valid("synchronize");
    done_.synchronize();
    release_stash();
  }
  /// Host poll: has the collective completed?
  [[nodiscard]] bool ready() const {
    require_valid("ready");
    return done_.ready();
  }
  [[nodiscard]] bool valid() const noexcept { return valid_; }
  /// Guards still held (released by the first wait or synchronize).
  [[nodiscard]] std::size_t stashed() const noexcept { return stash_.size(); }

 private:
  void require_valid(char const* what) const {
    expects<logic_error>(valid_, "lifetime::collective_work::", what, ": the handle is empty (moved-from or "
                         "default-constructed)");
  }
  void release_stash() {
    while (!stash_.empty()) {
      stash_.back().release();  // may throw: the guards not yet released stay stashed
      stash_.pop_back();
    }
  }

  event_type done_{};
  std::vector<Guard> stash_;
  bool valid_ = false;
};

namespace detail {

template <class C, class G>
concept guard_for = communicator<C> && is_guard_v<G> && std::same_as<typename G::stream_type, typename C::stream_type>;

template <class G>
using stream_of = typename G::stream_type;

// `comm_stream` waits (device-side) for the work issued to `caller` so far.
template <class G>
void order_after(stream_of<G> const& caller, stream_of<G> const& comm_stream) {
  if (caller == comm_stream) return;
  typename G::event_type ready;
  ready.record(caller);
  ready.wait_on(comm_stream);
}

// After the collective: the guard learns that comm_stream used it; an rvalue goes to the stash.
template <class In, class G = std::remove_cvref_t<In>>
void hand_over(In&& g, stream_of<G> const& comm_stream, std::vector<G>& stash) {
  g.use_on(comm_stream);
  if constexpr (!std::is_lvalue_reference_v<In>) stash.push_back(std::move(g));
}

// Once the collective is issued: record the uses (`hand_over(stash)`) and the completion event.
// Should that fail (no event could be created), the host waits for the comm stream before
// rethrowing, so that a guard the caller still holds can be released safely.
template <class G, class HandOver>
[[nodiscard]] collective_work<G> after_issue(stream_of<G> const& comm_stream, HandOver&& hand_over_all) {
  try {
    std::vector<G> stash;
    hand_over_all(stash);
    typename G::event_type done;
    done.record(comm_stream);
    return collective_work<G>(std::move(done), std::move(stash));
  } catch (...) {
    comm_stream.synchronize();
    throw;
  }
}

}  // namespace detail

/// In-place all-reduce of `buffer` (elements of T). The caller keeps the buffer.
template <class T, class C, class G>
  requires detail::guard_for<C, G>
[[nodiscard]] collective_work<G> all_reduce_async(C& comm, G& buffer, reduce_op op, detail::stream_of<G> const& caller,
                                                  detail::stream_of<G> const& comm_stream) {
  std::span<T> data = buffer.template as_span<T>();
  detail::order_after<G>(caller, comm_stream);
  comm.all_reduce(std::span<T const>(data), data, op, comm_stream);
  return detail::after_issue<G>(comm_stream,
                                [&](std::vector<G>& stash) { detail::hand_over(buffer, comm_stream, stash); });
}

/// Out-of-place all-reduce. `input` as an rvalue is stashed and released by wait().
template <class T, class C, class In, class G>
  requires detail::guard_for<C, G> && std::same_as<std::remove_cvref_t<In>, G>
[[nodiscard]] collective_work<G> all_reduce_async(C& comm, In&& input, G& output, reduce_op op,
                                                  detail::stream_of<G> const& caller,
                                                  detail::stream_of<G> const& comm_stream) {
  std::span<T const> in = input.template as_span<T const>();
  std::span<T> out = output.template as_span<T>();
  detail::order_after<G>(caller, comm_stream);
  comm.all_reduce(in, out, op, comm_stream);
  return detail::after_issue<G>(comm_stream, [&](std::vector<G>& stash) {
    detail::hand_over(output, comm_stream, stash);
    detail::hand_over(std::forward<In>(input), comm_stream, stash);
  });
}

/// All-gather: `output` holds `input` x group size elements, rank-major.
template <class T, class C, class In, class G>
  requires detail::guard_for<C, G> && std::same_as<std::remove_cvref_t<In>, G>
[[nodiscard]] collective_work<G> all_gather_async(C& comm, In&& input, G& output, detail::stream_of<G> const& caller,
                                                  detail::stream_of<G> const& comm_stream) {
  std::span<T const> in = input.template as_span<T const>();
  std::span<T> out = output.template as_span<T>();
  detail::order_after<G>(caller, comm_stream);
  comm.all_gather(in, out, comm_stream);
  return detail::after_issue<G>(comm_stream, [&](std::vector<G>& stash) {
    detail::hand_over(output, comm_stream, stash);
    detail::hand_over(std::forward<In>(input), comm_stream, stash);
  });
}

/// Reduce-scatter: `input` holds `output` x group size elements; rank r gets block r.
template <class T, class C, class In, class G>
  requires detail::guard_for<C, G> && std::same_as<std::remove_cvref_t<In>, G>
[[nodiscard]] collective_work<G> reduce_scatter_async(C& comm, In&& input, G& output, reduce_op op,
                                                      detail::stream_of<G> const& caller,
                                                      detail::stream_of<G> const& comm_stream) {
  std::span<T const> in = input.template as_span<T const>();
  std::span<T> out = output.template as_span<T>();
  detail::order_after<G>(caller, comm_stream);
  comm.reduce_scatter(in, out, op, comm_stream);
  return detail::after_issue<G>(comm_stream, [&](std::vector<G>& stash) {
    detail::hand_over(output, comm_stream, stash);
    detail::hand_over(std::forward<In>(input), comm_stream, stash);
  });
}

/// In-place broadcast of `root`'s buffer. The caller keeps the buffer.
template <class T, class C, class G>
  requires detail::guard_for<C, G>
[[nodiscard]] collective_work<G> broadcast_async(C& comm, G& buffer, int root, detail::stream_of<G> const& caller,
                                                 detail::stream_of<G> const& comm_stream) {
  std::span<T> data = buffer.template as_span<T>();
  detail::order_after<G>(caller, comm_stream);
  comm.broadcast(data, root, comm_stream);
  return detail::after_issue<G>(comm_stream,
                                [&](std::vector<G>& stash) { detail::hand_over(buffer, comm_stream, stash); });
}

}  // namespace headroom::lifetime
