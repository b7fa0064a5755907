// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// device_reducer: the max reduction of a report whose values live in device memory, with no host
// round trip on the training thread.
//
//   using step_report = stats::report<stats::field<"allocated_bytes.all.peak", std::int64_t>,
//                                     stats::field<"free_gigabytes", double, stats::minimum>>;
//   auto const plan = stats::reduce_plan::for_report<step_report>();
//   stats::workspace dev(cuda::device_resource{}, s, device_reducer<step_report, nccl::communicator>::device_bytes(plan));
//   stats::workspace host(cuda::pinned_resource{}, s, device_reducer<...>::pinned_bytes(plan, 2));
//   stats::cuda::device_reducer<step_report, nccl::communicator> reduce(comm, dev.bytes(), host.bytes(), s);
//   fill<<<...>>>(reduce.view(), ...);          // kernels write this rank's values (device_report.hpp)
//   auto pending = reduce.max(s);               // enqueue: one all_reduce, one small D2H copy, one event
//   ...                                         // the step goes on; later, on any thread:
//   if (pending.ready()) log(pending.get());    // every key's max (min) across the group
//
// Per step the device runs ONE ncclAllReduce(max, int64) of exactly the report's keys (no header,
// no staging kernel), then copies the result into a pinned slot and records that slot's event. The
// host enqueues three calls and returns; it never waits on the step. The whole sequence can be
// captured in a CUDA graph (see max()).
//
// Exactness and the schema: values are order keys (detail/order_key.hpp), so int64 stays exact
// over its whole range and doubles keep every bit. The schema (hash, key count) is agreed ONCE,
// in the constructor, by the host reducer's one collective: ranks whose reports differ all throw
// collective_mismatch there (a capacity_error when a report exceeds the plan), so no rank enters
// the per-step all-reduce with a different size. The constructor is therefore a collective:
// every rank of `comm` constructs its reducer together, with the same plan.
//
// Slots: the pinned buffer holds `slots` results (pinned_bytes(plan, slots)); max() takes them in
// turn, so a handle's result stays readable until `slots` later reductions were enqueued. get()
// on an older handle throws logic_error instead of returning a newer (or torn) result, also when
// a newer reduction lands in its slot while get() reads it on another thread (a generation
// counter read before and after). A reduction captured in a graph owns its slot (see max()).
//
// Streams: max(), store() and reset() may be called on different streams; the send and receive
// words are shared, so a call on another stream than the last reduction's waits for that
// reduction's copy on the device first (eager calls; a capture cannot wait on uncaptured work).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/stats/cuda/device_report.hpp"
#include "headroom/stats/cuda/staging.hpp"
#include "headroom/stats/detail/order_key.hpp"
#include "headroom/stats/detail/wire.hpp"
#include "headroom/stats/plan.hpp"
#include "headroom/stats/policies.hpp"
#include "headroom/stats/reducer.hpp"

namespace headroom::stats::cuda {

template <reducible_report R, device_buffer_communicator C, nan_policy Nan = propagate_nan>
class device_reducer;

/// The result of one device_reducer::max: poll ready(), read get(). Holds a pointer to its
/// reducer, which must outlive it.
template <reducible_report R, device_buffer_communicator C, nan_policy Nan = propagate_nan>
class pending_max {
 public:
  pending_max() noexcept = default;

  /// True once the reduction and its copy to the host finished (cudaEventQuery; never blocks).
  [[nodiscard]] bool ready() const {
    expect_valid("ready");
    return slot_ < 0 || owner_->slot_ready(slot_);
  }
  /// The reduced report. Blocks until ready() (cudaEventSynchronize) when called earlier: poll
  /// ready() first to keep the host free.
  [[nodiscard]] R get() const {
    expect_valid("get");
    return owner_->result(slot_, generation_);
  }
  /// Was this handle produced by max() (a default-constructed one was not)?
  [[nodiscard]] bool valid() const noexcept { return owner_ != nullptr; }

 private:
  friend class device_reducer<R, C, Nan>;
  pending_max(device_reducer<R, C, Nan> const* owner, int slot, std::uint64_t generation) noexcept
      : owner_(owner), slot_(slot), generation_(generation) {}
  void expect_valid(char const* what) const {
    expects<logic_error>(owner_ != nullptr, "stats::cuda::pending_max::", what,
                         ": empty handle (default-constructed); take the handle that device_reducer::max returned");
  }

  device_reducer<R, C, Nan> const* owner_ = nullptr;
  int slot_ = -1;  // -1: nothing was reduced (empty report); the schema is the result
  std::uint64_t generation_ = 0;
};

template <reducible_report R, device_buffer_communicator C, nan_policy Nan>
class device_reducer {
 public:
  using report_type = R;
  using pending_type = pending_max<R, C, Nan>;

  /// Device workspace: the send words and the receive words of the plan's wire layout.
  [[nodiscard]] static std::size_t device_bytes(reduce_plan const& plan) noexcept { return 2 * plan.max_bytes(); }
  /// Pinned host memory for `slots` results in flight (>= 1).
  [[nodiscard]] static std::size_t pinned_bytes(reduce_plan const& plan, int slots) {
    expects(slots >= 1, "stats::cuda::device_reducer::pinned_bytes: slots = ", slots, ", expected >= 1");
    return static_cast<std::size_t>(slots) * plan.max_bytes();
  }

  /// Collective over `comm`: agrees the schema of `schema` (its keys, kinds and ops; its values
  /// become the initial device values) with every rank, in one blocking collective on `s`.
  /// `device_workspace`: device_bytes(plan), 8-byte aligned. `pinned_host`: page-locked memory
  /// of pinned_bytes(plan, slots) for some slots >= 1. The plan must be the same on every rank.
  device_reducer(C& comm, reduce_plan plan, R schema, std::span<std::byte> device_workspace,
                 std::span<std::byte> pinned_host, headroom::cuda::stream_view s)
      : comm_(&comm), plan_(plan), schema_(std::move(schema)), device_(device_workspace), pinned_(pinned_host) {
    char const* what = "stats::cuda::device_reducer";
    expects(device_.size() >= device_bytes(plan_), what, ": device workspace of ", device_.size(), " bytes, expected >= ",
            device_bytes(plan_), " (device_bytes(plan) for ", plan_.capacity(), " keys)");
    expects(aligned(device_.data()), what, ": device workspace ", static_cast<void const*>(device_.data()),
            " is not 8-byte aligned");
    expects(aligned(pinned_.data()), what, ": pinned host buffer ", static_cast<void const*>(pinned_.data()),
            " is not 8-byte aligned");
    slots_ = static_cast<int>(pinned_.size() / plan_.max_bytes());
    expects(slots_ >= 1, what, ": pinned host buffer of ", pinned_.size(), " bytes holds no result slot; expected >= ",
            plan_.max_bytes(), " bytes (pinned_bytes(plan, 1))");
    size_ = stats::detail::report_access<R>::size(schema_);
    // The one agreement: the host reducer's collective carries the schema hash and key count,
    // and every rank throws the same error when they differ. Its staging uses our workspace.
    if (comm.size() > 1) {
      reducer<blocking_device_staging, Nan> agree(plan_, blocking_device_staging(device_.first(device_bytes(plan_))));
      static_cast<void>(agree.max(schema_, comm, s));
    } else {
      expects<capacity_error>(size_ <= plan_.capacity(), what, ": the report has ", size_,
                              " keys but the reduce_plan holds ", plan_.capacity());
    }
    events_.reserve(static_cast<std::size_t>(slots_));
    for (int i = 0; i < slots_; ++i) events_.emplace_back(headroom::cuda::event_options{.timing = false});
    generation_ = std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(slots_));
    for (int i = 0; i < slots_; ++i) generation_[static_cast<std::size_t>(i)].store(0);
    captured_.assign(static_cast<std::size_t>(slots_), false);
    last_stream_.assign(static_cast<std::size_t>(slots_), headroom::cuda::stream_view{});
    host_keys_.resize(plan_.max_words());
    store(schema_, s);
  }
  /// The typed form: the schema is the report type itself, the plan its size.
  template <typed_report Q = R>
  device_reducer(C& comm, std::span<std::byte> device_workspace, std::span<std::byte> pinned_host,
                 headroom::cuda::stream_view s)
      : device_reducer(comm, reduce_plan::for_report<Q>(), Q{}, device_workspace, pinned_host, s) {}

  device_reducer(device_reducer const&) = delete;
  device_reducer& operator=(device_reducer const&) = delete;

  /// This rank's values as order keys in device memory (size() words): the kernels' target.
  [[nodiscard]] std::span<std::int64_t> keys() const noexcept { return {send() + reduce_plan::max_header_words, size_}; }
  /// The device writer of a typed report (device_report.hpp).
  template <typed_report Q = R>
  [[nodiscard]] device_report_view<Q, Nan> view() const noexcept {
    return device_report_view<Q, Nan>(keys().data());
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] int slots() const noexcept { return slots_; }
  [[nodiscard]] reduce_plan const& plan() const noexcept { return plan_; }

  /// Sets this rank's values from a host report (the CUDA sources: mem_pool_stats,
  /// device_memory), in stream order on `s`. The report must have the agreed schema (a local
  /// check: this issues no collective). A pageable copy: the host buffer is free on return, and
  /// it cannot be captured in a graph (capture the kernels that write view() instead).
  void store(R const& values, headroom::cuda::stream_view s) {
    using A = stats::detail::report_access<R>;
    expects(A::size(values) == size_ && A::hash(values) == A::hash(schema_), "stats::cuda::device_reducer::store: the report has ",
            A::size(values), " keys ", stats::detail::preview_keys(values), ", the agreed schema has ", size_, " keys ",
            stats::detail::preview_keys(schema_), "; store the report type the reducer was built with");
    stats::detail::pack_max(values, -1, Nan::propagates, std::span<std::int64_t>(host_keys_));
    after_last_reduction(s);
    upload(s);
  }
  /// Every key back to "no value": int64 max fields decode to INT64_MIN, min fields to
  /// INT64_MAX, doubles to NaN, so any rank's value wins the next reduction. Stream-ordered.
  void reset(headroom::cuda::stream_view s) {
    std::fill(host_keys_.begin(), host_keys_.end(), stats::detail::key_min);
    after_last_reduction(s);
    upload(s);
  }

  /// Enqueues the reduction on `s`: all_reduce(max) of keys() into the receive words, a copy of
  /// them into the next pinned slot, and that slot's event. Returns at once.
  ///
  /// Graph capture: capture max(s) (with the kernels that fill view()) once, keep the handle; each
  /// launch of the graph reduces into the same slot and re-records its event, so after a launch
  /// `ready()` / `get()` give that launch's result. A captured reduction keeps its slot for the
  /// reducer's lifetime (eager calls rotate through the others; capacity_error when none is
  /// left). Read a launch's result before the next launch's copy can land, and not before the
  /// first launch (the generation check cannot see graph launches).
  [[nodiscard]] pending_type max(headroom::cuda::stream_view s) {
    if (size_ == 0) return pending_type(this, -1, 0);
    auto const [k, capturing] = take_slot(s);
    auto const ku = static_cast<std::size_t>(k);
    // A slot last written from another stream: order this copy after that one (device-side);
    // and the shared send / receive words after the last reduction, whichever slot it used.
    if (!capturing && last_stream_[ku] != s && generation_[ku].load() != 0) events_[ku].wait_on(s);
    if (!capturing) after_last_reduction(s);
    std::int64_t* const in = send() + reduce_plan::max_header_words;
    std::int64_t* const out = recv() + reduce_plan::max_header_words;
    std::int64_t const* result = in;
    if (comm_->size() > 1) {
      comm_->all_reduce(std::span<std::int64_t const>(in, size_), std::span<std::int64_t>(out, size_), reduce_op::max, s);
      result = out;
    }
    // The generation moves before the copy is enqueued: a get() of the slot's previous result that
    // reads the slot while this copy lands sees the change when it looks again.
    std::uint64_t const generation = generation_[ku].fetch_add(1) + 1;
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(slot(k) + reduce_plan::max_header_words, result, size_ * sizeof(std::int64_t),
                                      cudaMemcpyDeviceToHost, s.get()));
    // Under capture a plain record is only a fork/join marker inside the graph; an external
    // record becomes an event-record node, so the host can poll the event after each launch.
    HEADROOM_CUDA_TRY(cudaEventRecordWithFlags(events_[ku].get(), s.get(),
                                               capturing ? cudaEventRecordExternal : cudaEventRecordDefault));
    last_stream_[ku] = s;
    last_slot_ = k;
    return pending_type(this, k, generation);
  }

 private:
  friend class pending_max<R, C, Nan>;

  [[nodiscard]] static bool aligned(void const* p) noexcept {
    return reinterpret_cast<std::uintptr_t>(p) % alignof(std::int64_t) == 0;
  }
  [[nodiscard]] std::int64_t* send() const noexcept { return reinterpret_cast<std::int64_t*>(device_.data()); }
  [[nodiscard]] std::int64_t* recv() const noexcept { return send() + plan_.max_words(); }
  [[nodiscard]] std::int64_t* slot(int k) const noexcept {
    return reinterpret_cast<std::int64_t*>(pinned_.data()) + static_cast<std::size_t>(k) * plan_.max_words();
  }

  // The last eager reduction (any slot) ran on another stream than `s`: `s` waits for its copy,
  // after which its all-reduce no longer reads the send words nor the copy the receive words.
  void after_last_reduction(headroom::cuda::stream_view s) {
    if (last_slot_ < 0) return;
    auto const lu = static_cast<std::size_t>(last_slot_);
    if (last_stream_[lu] != s && !captured_[lu]) events_[lu].wait_on(s);
  }

  void upload(headroom::cuda::stream_view s) {
    if (size_ == 0) return;
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(keys().data(), host_keys_.data() + reduce_plan::max_header_words,
                                      size_ * sizeof(std::int64_t), cudaMemcpyHostToDevice, s.get()));
  }

  // The next slot for a reduction on `s`: eager calls rotate over the slots no graph owns; a
  // captured call takes one for good.
  struct slot_choice {
    int slot;
    bool capturing;
  };
  [[nodiscard]] slot_choice take_slot(headroom::cuda::stream_view s) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    HEADROOM_CUDA_TRY(cudaStreamIsCapturing(s.get(), &status));
    bool const capturing = status != cudaStreamCaptureStatusNone;
    for (int tries = 0; tries < slots_; ++tries) {
      int const k = next_slot_;
      next_slot_ = (next_slot_ + 1) % slots_;
      if (captured_[static_cast<std::size_t>(k)]) continue;
      if (capturing) captured_[static_cast<std::size_t>(k)] = true;
      return {k, capturing};
    }
    throw capacity_error("stats::cuda::device_reducer::max: all " + std::to_string(slots_) +
                         " pinned slots belong to captured graphs; size the pinned buffer with pinned_bytes(plan, slots) "
                         "for one slot per captured reduction plus at least one for eager calls");
  }

  [[nodiscard]] bool slot_ready(int k) const { return events_[static_cast<std::size_t>(k)].ready(); }

  [[nodiscard]] R result(int k, std::uint64_t generation) const {
    if (k < 0) return schema_;
    auto const ku = static_cast<std::size_t>(k);
    auto const overwritten = [&](std::uint64_t now) {
      return logic_error(headroom::detail::concat(
          "stats::cuda::pending_max::get: the result of reduction ", generation, " in slot ", k,
          " was overwritten by reduction ", now, "; with ", slots_, " pinned slots, read a result before ", slots_,
          " more max() calls, or size the pinned buffer for more slots"));
    };
    if (std::uint64_t const now = generation_[ku].load(); now != generation) throw overwritten(now);
    events_[ku].synchronize();
    R out = stats::detail::unpack_max(schema_, std::span<std::int64_t const>(slot(k), plan_.max_words()));
    // A newer reduction into this slot (another thread's max()) may have landed while we read.
    if (std::uint64_t const now = generation_[ku].load(); now != generation) throw overwritten(now);
    return out;
  }

  C* comm_;
  reduce_plan plan_;
  R schema_;
  std::span<std::byte> device_;
  std::span<std::byte> pinned_;
  std::size_t size_ = 0;
  int slots_ = 0;
  int next_slot_ = 0;
  std::vector<headroom::cuda::event> events_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> generation_;  // per slot; read by get() on any thread
  std::vector<bool> captured_;  // slots owned by a captured reduction
  std::vector<headroom::cuda::stream_view> last_stream_;
  int last_slot_ = -1;  // the last eager or captured reduction's slot
  std::vector<std::int64_t> host_keys_;  // store()'s packed words (header unused)
};

}  // namespace headroom::stats::cuda
