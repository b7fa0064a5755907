// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// executor: runs one rank's part of a validated schedule with the user's stage callbacks,
// moving activations and gradients with the communicator's send/recv.
//
//   pipeline::executor exec(comm, resource, sched, bytes);            // host: inline streams
//   auto result = exec.step(my_stage, pipeline::retention::reduced{});
//   exec.statistics().bytes().peak  == exec.plan(pipeline::retention::reduced{}).rank(r).peak
//
// Memory. Every buffer (received input, output, stash, gradients, weight stash) is allocated from
// the caller's stream_resource on the compute stream, with the sizes of model_bytes, and counted
// by a stats::statistics_resource in front of it. A sent output (or input gradient) is released
// right after its send, stream-ordered (Megatron's deallocate_output_tensor); the last stage
// keeps outputs and loss values only as its output_retention says. The counters therefore say
// what the executor holds, and predict_memory() predicts them exactly.
//
// GPU backends plug in through the template parameters; nothing here blocks the host:
//   Comm      any headroom::communicator whose send/recv move std::byte spans (thread_group,
//             mpi::communicator on host buffers, nccl::communicator on device buffers)
//   Resource  a stream_resource<Resource, Stream> for activations and gradients (e.g.
//             cuda::async_resource, or a pool); it must outlive the executor
//   Stream    the communicator's stream type (cuda::stream_view for NCCL)
//   Event     lifetime::event_type_for_t<Stream>: the host pairing is included here; include
//             lifetime/cuda/guard.hpp before instantiating for cuda::stream_view
// Two streams: callbacks run on `compute`; transfers run on `comm` (the same stream by
// default). When they differ, each transfer makes `comm` wait for `compute` on the device, the
// computation that reads a received buffer makes `compute` wait for the recv's event first (not
// the recv's place in the list: computations in between go on), and a sent buffer's
// lifetime::guard is handed to `comm` (set_owner) and released: it is freed on `comm` after the
// send, so compute does not wait for the send (unless the allocator reuses the block for compute
// before the free has run). On the host (thread ranks, MPI) the transport defers the wait the
// same way; see transport.hpp.
// The schedules are deadlock-free under blocking send/recv (validate() checks it), so NCCL's
// device-side blocking p2p is safe with one host thread per rank.
//
// Lifetime: an output kept under retention::all is a kept_output: the guard of its block and a
// share of the executor's counting resource it returns to, so it may outlive the executor (a
// temporary one too) and the step_result it came in. The caller's own resource must outlive
// them, as it must outlive any allocation from it.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/lifetime/guard.hpp"
#include "headroom/lifetime/host.hpp"  // event_type_for<host::inline_stream>
#include "headroom/lifetime/policy.hpp"
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/fingerprint.hpp"
#include "headroom/pipeline/memory_model.hpp"
#include "headroom/pipeline/output_lifetime.hpp"
#include "headroom/pipeline/retention.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/stage.hpp"
#include "headroom/pipeline/stage_bytes.hpp"
#include "headroom/pipeline/transfer_grouping.hpp"
#include "headroom/pipeline/transport.hpp"
#include "headroom/pipeline/validate.hpp"
#include "headroom/stats/statistics_resource.hpp"

namespace headroom::pipeline {

/// A communicator that moves raw bytes point to point (every headroom substrate does).
template <class C>
concept byte_transport = communicator<C> && requires(C& c, std::span<std::byte const> in, std::span<std::byte> out, int peer,
                                                     typename C::stream_type const& s) {
  c.send(in, peer, s);
  c.recv(out, peer, s);
};

namespace detail {
/// A non-owning stream_resource that forwards to a caller-owned one, so the statistics adaptor
/// can count what passes through without copying the caller's resource.
template <class Resource>
class resource_ref {
 public:
  explicit resource_ref(Resource& r) noexcept : r_(&r) {}
  template <class S>
    requires stream_resource<Resource, S>
  [[nodiscard]] void* allocate(S const& s, std::size_t bytes, std::size_t alignment = default_alignment) {
    return r_->allocate(s, bytes, alignment);
  }
  template <class S>
    requires stream_resource<Resource, S>
  void deallocate(S const& s, void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    r_->deallocate(s, p, bytes, alignment);
  }
  friend bool operator==(resource_ref const& a, resource_ref const& b) noexcept { return *a.r_ == *b.r_; }
  template <class P>
    requires has_property<Resource, P>
  friend void get_property(resource_ref const&, P) noexcept {}

 private:
  Resource* r_;
};
}  // namespace detail

/// An output the last stage kept (retention::all): its buffer and a share of the resource that
/// buffer returns to. The buffer is always given back before that share is dropped (on
/// destruction, move-assignment and release()), so a kept output never outlives its resource.
template <class Buffer>
class kept_output {
 public:
  kept_output(std::shared_ptr<void const> owner, Buffer buffer) noexcept
      : owner_(std::move(owner)), buffer_(std::move(buffer)) {}
  kept_output(kept_output&&) noexcept = default;  // a new object: nothing of its own to give back
  kept_output& operator=(kept_output&& other) noexcept {
    buffer_ = std::move(other.buffer_);  // this object's old block goes back while its owner is still held
    owner_ = std::move(other.owner_);
    return *this;
  }
  kept_output(kept_output const&) = delete;
  kept_output& operator=(kept_output const&) = delete;
  ~kept_output() = default;  // buffer_ is declared after owner_: destroyed (given back) first

  [[nodiscard]] void* data() const noexcept { return buffer_.data(); }
  [[nodiscard]] std::size_t size() const noexcept { return buffer_.size(); }
  [[nodiscard]] auto* resource() const noexcept { return buffer_.resource(); }
  /// The guard itself (stream uses, stream-ordered release).
  [[nodiscard]] Buffer& buffer() noexcept { return buffer_; }
  [[nodiscard]] Buffer const& buffer() const noexcept { return buffer_; }
  /// Gives the block back now; the object stays, empty.
  void release() {
    if (buffer_.live()) buffer_.release();
  }

 private:
  std::shared_ptr<void const> owner_;
  Buffer buffer_;
};

/// What one step leaves the caller, filled on the rank that holds the last virtual stage.
template <class Loss, class Buffer>
struct step_result {
  std::vector<int> microbatches;  // micro-batch of each entry below, in the order the losses ran
  std::vector<Loss> losses;       // retention::reduced and ::all
  std::vector<kept_output<Buffer>> outputs;  // retention::all: the last stage's outputs, still allocated
};

// Checked by static_asserts rather than constraints, so that a wrong argument stops at a sentence.
template <class Comm, class Resource, class Stream = typename Comm::stream_type,
          class Event = lifetime::event_type_for_t<Stream>>
class executor {
  static_assert(byte_transport<Comm>,
                "pipeline::executor<Comm, Resource>: Comm is not a pipeline::byte_transport (a headroom::communicator "
                "whose send / recv take std::span<std::byte>); use a headroom substrate's communicator "
                "(host::thread_communicator, MPI, NCCL) or add byte send / recv to yours");
  static_assert(stream_resource<Resource, Stream>,
                "pipeline::executor<Comm, Resource>: Resource is not a headroom::stream_resource on the "
                "communicator's stream type; use that substrate's resource (host::aligned_resource on the host)");
  static_assert(event<Event, Stream> && std::default_initializable<Event>,
                "pipeline::executor<Comm, Resource, Stream, Event>: Event is not a default-constructible "
                "headroom::event of Stream; leave it to its default, lifetime::event_type_for_t<Stream>");

 public:
  using communicator_type = Comm;
  using stream_type = Stream;
  using counting_resource = stats::statistics_resource<detail::resource_ref<Resource>>;
  using buffer = lifetime::guard<counting_resource, Stream, Event, lifetime::stream_ordered>;

  /// Checks everything before any transfer. Each rank validates its own inputs (the schedule,
  /// one model_bytes entry per virtual stage, a communicator of p ranks); then one all-gather
  /// of a fingerprint (fingerprint.hpp) proves that every rank holds the same schedule and
  /// sizes. Every rank joins that collective even when its own inputs are bad, so every rank
  /// throws: its own error (invalid_argument) on a rank whose inputs are bad, otherwise
  /// collective_mismatch naming the ranks that differ and in what.
  executor(Comm& comm, Resource& resource, schedule s, model_bytes bytes, Stream compute, Stream comm_stream)
      : comm_(&comm),
        resource_(&resource),
        transport_(comm),
        counted_(std::make_shared<counting_resource>(detail::resource_ref<Resource>(resource))),
        schedule_(std::move(s)),
        bytes_(std::move(bytes)),
        compute_(compute),
        transfer_(comm_stream) {
    std::exception_ptr own;  // this rank's own verdict, thrown after the collective
    try {
      validate(schedule_);
      auto const& shape = schedule_.shape();
      bytes_.check(shape, "pipeline::executor");
      expects(comm.size() == shape.stages, "pipeline::executor: the communicator has ", comm.size(),
              " ranks, the schedule '", schedule_.name(), "' needs p = ", shape.stages);
      rank_ = comm.rank();
      shape.check_rank(rank_, "pipeline::executor");
    } catch (error const&) {
      own = std::current_exception();
    }
    auto const mine = fingerprint(schedule_, bytes_, own == nullptr);
    std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(comm.size()));
    transport_.all_gather(std::span<std::int64_t const>(mine), std::span<std::int64_t>(all), transfer_, resource);
    if (own) std::rethrow_exception(own);
    auto const why = detail::disagreement(all, comm.size(), "pipeline::executor");
    expects<collective_mismatch>(why.empty(), why);
    // Substrates that connect peers lazily (NCCL) connect this rank's peers now, alike on both
    // sides of each pair (the ranks agree on the schedule, so the peer sets are symmetric).
    if constexpr (requires(std::span<int const> p) { transport_.connect(p, transfer_, resource); }) {
      std::vector<int> peers;
      for (action const& a : schedule_.actions(rank_))
        if (is_transfer(a.kind)) peers.push_back(a.peer);
      std::sort(peers.begin(), peers.end());
      peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
      transport_.connect(std::span<int const>(peers), transfer_, resource);
    }
  }
  /// One stream for callbacks and transfers (the host substrate's inline stream, by default).
  executor(Comm& comm, Resource& resource, schedule s, model_bytes bytes, Stream stream = Stream{})
    requires std::default_initializable<Stream>
      : executor(comm, resource, std::move(s), std::move(bytes), stream, stream) {}

  [[nodiscard]] schedule const& get_schedule() const noexcept { return schedule_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The counters of everything this executor holds (bytes, allocations; peaks per window).
  [[nodiscard]] counting_resource& statistics() noexcept { return *counted_; }

  /// The memory model's prediction for this executor's schedule and sizes.
  template <output_retention R, output_lifetime O = outputs::freed_when_sent, transfer_grouping T = transfers::one_by_one>
  [[nodiscard]] memory_plan plan(R r = {}, O o = {}, T t = {}) const {
    return predict_memory(schedule_, bytes_, r, o, t);
  }

  /// Runs this rank's actions of one step. Throws invalid_argument before any transfer when the
  /// schedule splits the backward and `stage` has no backward_input / backward_weight (on every
  /// rank alike: they hold the same schedule). When anything fails on this rank during the step
  /// (a callback throws, a transfer fails), the peers are told through the transport before the
  /// exception leaves: their waits throw group_aborted instead of hanging, and a peer that had
  /// already finished its actions learns it at the step's closing handshake.
  /// Returns step_result<loss_t<Stage, Stream>, buffer>. Unconstrained so that a stage without
  /// forward / loss stops at the sentence below, not at loss_t's constraint.
  /// T (transfers::one_by_one or grouped) says how runs of consecutive transfers are issued; see
  /// transfer_grouping.hpp.
  template <class Stage, output_retention R = retention::reduced, output_lifetime O = outputs::freed_when_sent,
            transfer_grouping T = transfers::one_by_one>
  auto step(Stage& stage, R r = {}, O o = {}, T t = {}) {
    static_assert(forward_stage<Stage, Stream>,
                  "pipeline::executor::step(stage): Stage is not a pipeline::forward_stage of the executor's stream "
                  "type: give it forward(forward_args<Stream> const&) and a loss(loss_args<Stream> const&) that "
                  "returns a movable, non-void value (and backward(backward_args<Stream> const&) to train)");
    if constexpr (forward_stage<Stage, Stream>) return step_checked(stage, r, o, t);
  }

 private:
  template <class Stage, class R, class O, class T>
    requires forward_stage<Stage, Stream>
  step_result<loss_t<Stage, Stream>, buffer> step_checked(Stage& stage, R, O, T) {
    if constexpr (!pipeline_stage<Stage, Stream>) {
      expects(schedule_.forward_only(), "pipeline::executor::step: schedule '", schedule_.name(),
              "' trains (it has backwards); the stage has no backward member, expected a forward-only schedule");
    }
    if constexpr (!split_backward_stage<Stage, Stream>) {
      expects(!schedule_.splits_backward(), "pipeline::executor::step: schedule '", schedule_.name(),
              "' splits the backward into backward_input and backward_weight; the stage has no such members");
    }
    auto const& shape = schedule_.shape();
    // Declared before the try: buffers a receive may still write into outlive the abort.
    std::vector<slot> slots(static_cast<std::size_t>(shape.microbatches) * static_cast<std::size_t>(shape.chunks));
    step_result<loss_t<Stage, Stream>, buffer> result;
    // A resource that plans the step's buffers (buffer_arena.hpp) is told where the step begins
    // and ends, and under which policies.
    constexpr bool planned = requires(Resource& m) {
      m.begin_step(R::name, O::name, T::name);
      m.end_step();
      m.abandon_step();
    };
    transport_.begin();
    try {
      if constexpr (planned) resource_->begin_step(R::name, O::name, T::name);
      run_actions<R, O, T>(stage, slots, result);
      transport_.finish(transfer_);
      if constexpr (planned) resource_->end_step();
    } catch (group_aborted const&) {
      if constexpr (planned) resource_->abandon_step();
      throw;  // a peer failed and told everyone
    } catch (std::exception const& e) {
      if constexpr (planned) resource_->abandon_step();
      abort_peers([&] { return headroom::detail::concat("pipeline::executor: rank ", rank_, " failed: ", e.what()); });
      throw;
    } catch (...) {
      if constexpr (planned) resource_->abandon_step();
      abort_peers([&] { return headroom::detail::concat("pipeline::executor: rank ", rank_, " failed"); });
      throw;
    }
    return result;
  }

  // A receive posted and not yet waited on: the transport's ticket (host substrates that defer)
  // and the event after it on the transfer stream (two streams).
  struct pending_receive {
    std::optional<transfer_ticket> ticket;
    std::optional<Event> event;
  };
  // The buffers of one (micro-batch, chunk) on this rank; empty where the size is 0 or the
  // buffer is not live. A received buffer keeps its ticket until the computation that reads it.
  // A local hand-off (two stages of one rank) moves the producer's buffer into the consumer's
  // slot; under outputs::kept_until_backward the producer keeps its output and the consumer
  // reads it through `input_view` (one block, freed by the producer's backward, as PyTorch's
  // forward cache holds it).
  struct slot {
    std::optional<buffer> input, output, stash, grad_output, grad_input, weight_stash;
    std::optional<pending_receive> input_pending, grad_output_pending;
    std::optional<std::span<std::byte>> input_view;
  };

  // A computation runs in three phases: its buffers are allocated (and a local hand-off taken
  // over), its callbacks run, its buffers are released. An overlapped action allocates for both
  // its forward and its backward before either runs, and releases after both, as the memory
  // model counts it.
  template <class R, class O, class T, class Stage, class Result>
  void run_actions(Stage& stage, std::vector<slot>& slots, Result& result) {
    auto const& shape = schedule_.shape();
    auto const& where = schedule_.placement();
    bool const eval = schedule_.forward_only();
    auto const slot_of = [&](int microbatch, int stage_index) -> slot& {
      return slots[static_cast<std::size_t>(microbatch) * static_cast<std::size_t>(shape.chunks) +
                   static_cast<std::size_t>(where.chunk_of(stage_index))];
    };
    auto const input_of = [](slot& s) { return s.input_view ? *s.input_view : view(s.input); };

    auto const forward_prepare = [&](action const& a) {
      slot& sl = slot_of(a.microbatch, a.stage);
      arrived(sl.input_pending);
      if (a.stage > 0 && where.rank_of(a.stage - 1) == rank_) {  // local hand-off from the previous chunk
        slot& prev = slot_of(a.microbatch, a.stage - 1);
        if (O::until_backward && !eval) {
          sl.input_view = view(prev.output);
        } else {
          sl.input = std::move(prev.output);
          prev.output.reset();
        }
      }
      stage_bytes const& b = bytes_.at(a.stage, a.microbatch);
      sl.output = allocate(b.output);
      sl.stash = allocate(b.activations);
    };
    auto const forward_args_of = [&](action const& a) {
      slot& sl = slot_of(a.microbatch, a.stage);
      return forward_args<Stream>{a.microbatch, a.stage, where.chunk_of(a.stage), input_of(sl), view(sl.output), view(sl.stash), compute_};
    };
    auto const forward_finish = [&](action const& a) {  // the loss, then what no backward reads
      slot& sl = slot_of(a.microbatch, a.stage);
      if (shape.is_last(a.stage)) {
        auto value = stage.loss(loss_args<Stream>{a.microbatch, a.stage, view(sl.output), view(sl.stash), compute_});
        if constexpr (R::keeps_losses) {
          result.microbatches.push_back(a.microbatch);
          result.losses.push_back(std::move(value));
        }
        if constexpr (R::keeps_outputs) {
          if (sl.output) result.outputs.emplace_back(counted_, std::move(*sl.output));
          sl.output.reset();
        } else if (!O::until_backward || eval) {
          release(sl.output);
        }
      }
      if (eval) {  // no backward will read them
        release(sl.stash);
        release(sl.input);
      }
    };
    auto const backward_prepare = [&](action const& a) {
      slot& sl = slot_of(a.microbatch, a.stage);
      arrived(sl.grad_output_pending);
      if (!shape.is_last(a.stage) && where.rank_of(a.stage + 1) == rank_) {  // local hand-off from the next chunk's backward
        slot& next = slot_of(a.microbatch, a.stage + 1);
        sl.grad_output = std::move(next.grad_input);
        next.grad_input.reset();
      }
      sl.grad_input = allocate(bytes_.input(a.stage, a.microbatch));
      if (a.kind == action_kind::backward_input) sl.weight_stash = allocate(bytes_.at(a.stage, a.microbatch).weight_stash);
    };
    auto const backward_args_of = [&](action const& a) {
      slot& sl = slot_of(a.microbatch, a.stage);
      return backward_args<Stream>{a.microbatch,       a.stage,           where.chunk_of(a.stage),
                                   input_of(sl),       view(sl.grad_output), view(sl.grad_input),
                                   view(sl.stash),     view(sl.weight_stash), compute_};
    };
    auto const drop = [](std::optional<buffer>& b) { release(b); };
    auto const backward_finish = [&](action const& a) {  // the walk's rule (detail/buffer_walk.hpp)
      slot& sl = slot_of(a.microbatch, a.stage);
      detail::release_after_backward<O>(sl, a.kind, shape.is_last(a.stage), drop);
      sl.input_view.reset();
    };
    auto const run_backward = [&](action const& a) {
      if (a.kind == action_kind::backward_input) {
        if constexpr (split_backward_stage<Stage, Stream>) stage.backward_input(backward_args_of(a));
      } else {
        if constexpr (pipeline_stage<Stage, Stream>) stage.backward(backward_args_of(a));
      }
    };

    auto const list = schedule_.actions(rank_);
    for (std::size_t i = 0; i < list.size(); ++i) {
      action const& a = list[i];
      if (is_transfer(a.kind)) {  // a run of transfers: one by one, or the whole run as one batch
        std::size_t n = 1;
        if constexpr (T::batched)
          while (i + n < list.size() && is_transfer(list[i + n].kind)) ++n;
        run_transfers(list.subspan(i, n), slot_of, !O::until_backward || eval);
        i += n - 1;
        continue;
      }
      slot& sl = slot_of(a.microbatch, a.stage);
      switch (a.kind) {
        case action_kind::recv_forward:
        case action_kind::send_forward:
        case action_kind::recv_backward:
        case action_kind::send_backward: break;  // above
        case action_kind::forward:
          forward_prepare(a);
          stage.forward(forward_args_of(a));
          forward_finish(a);
          break;
        case action_kind::backward:
        case action_kind::backward_input:
          backward_prepare(a);
          run_backward(a);
          backward_finish(a);
          break;
        case action_kind::backward_weight:
          if constexpr (split_backward_stage<Stage, Stream>)
            stage.backward_weight(weight_args<Stream>{a.microbatch, a.stage, where.chunk_of(a.stage), view(sl.weight_stash), compute_});
          release(sl.weight_stash);
          detail::release_read<O>(sl, drop);
          break;
        case action_kind::overlapped: {
          action const f = forward_part(a), bw = backward_part(a);
          forward_prepare(f);
          backward_prepare(bw);
          if constexpr (overlapping_stage<Stage, Stream>) {
            stage.overlapped(forward_args_of(f), backward_args_of(bw));
          } else {  // one after the other
            stage.forward(forward_args_of(f));
            run_backward(bw);
          }
          forward_finish(f);  // the loss on the last stage
          backward_finish(bw);
          break;
        }
      }
    }
  }

  [[nodiscard]] std::optional<buffer> allocate(std::size_t bytes) {
    if (bytes == 0) return std::nullopt;
    return std::optional<buffer>(std::in_place, *counted_, compute_, bytes);
  }
  [[nodiscard]] static std::span<std::byte> view(std::optional<buffer>& b) noexcept {
    return b ? std::span<std::byte>(static_cast<std::byte*>(b->data()), b->size()) : std::span<std::byte>{};
  }
  static void release(std::optional<buffer>& b) {
    if (b) b->release();
    b.reset();
  }
  [[nodiscard]] bool two_streams() const { return !(compute_ == transfer_); }
  // `to` waits on the device for the work issued to `from` so far.
  static void order_after(Stream const& from, Stream const& to) {
    Event e;
    e.record(from);
    e.wait_on(to);
  }

  // A run of consecutive transfers (one, or a whole run under transfers::grouped). The run's
  // receive buffers are allocated first (ordered on compute, as the model counts), then every
  // transfer is posted in list order (as one batch of the substrate when there are several:
  // ncclGroupStart/End, MPI_Isends completed together), then the receives get their events and
  // the sent buffers are released. With two streams a sent buffer is handed to the transfer
  // stream and freed there, after its send: compute does not wait for the send (a peer that
  // posts its receive late would stall it otherwise), unless the allocator hands the block to a
  // compute allocation before the free has run (cudaMallocAsync may, with its default reuse
  // policy, by making compute wait for the transfer stream). The host goes on either way.
  // `release_sent_outputs` is false under kept_until_backward, where a sent output stays until
  // its backward.
  template <class SlotOf>
  void run_transfers(std::span<action const> run, SlotOf const& slot_of, bool release_sent_outputs) {
    auto const buffer_of = [&](action const& a) -> std::optional<buffer>& {
      slot& sl = slot_of(a.microbatch, a.stage);
      switch (a.kind) {
        case action_kind::recv_forward: return sl.input;
        case action_kind::recv_backward: return sl.grad_output;
        case action_kind::send_forward: return sl.output;
        default: return sl.grad_input;
      }
    };
    auto const pending_of = [&](action const& a) -> std::optional<pending_receive>& {
      slot& sl = slot_of(a.microbatch, a.stage);
      return a.kind == action_kind::recv_forward ? sl.input_pending : sl.grad_output_pending;
    };
    for (action const& a : run) {
      if (a.kind == action_kind::recv_forward) buffer_of(a) = allocate(bytes_.input(a.stage, a.microbatch));
      if (a.kind == action_kind::recv_backward) buffer_of(a) = allocate(bytes_.at(a.stage, a.microbatch).output);
    }
    // `transfer` waits for what compute did so far: the producers' writes, the allocations.
    if (two_streams()) order_after(compute_, transfer_);
    auto const post_all = [&] {
      for (action const& a : run) {
        if (is_recv(a.kind)) {
          auto const ticket = transport_.post_recv(view(buffer_of(a)), a.peer, transfer_);
          if constexpr (transport<Comm>::defers_receives) pending_of(a).emplace().ticket = ticket;
        } else {
          transport_.send(std::span<std::byte const>(view(buffer_of(a))), a.peer, transfer_);
        }
      }
    };
    try {
      if (run.size() > 1) {
        auto batch = transport_.batch();  // abandoned if posting throws (see transport.hpp)
        post_all();
        batch.end();
      } else {
        post_all();
      }
    } catch (...) {
      // What was posted may still run (NCCL launches an abandoned group): the buffers are marked
      // as used on the transfer stream, so the unwinding frees them only after it.
      if (two_streams())
        for (action const& a : run)
          if (std::optional<buffer>& b = buffer_of(a); b && b->live()) try {
              b->use_on(transfer_);
            } catch (...) {  // no event to be had: the free below is then unordered, as before
            }
      throw;
    }
    for (action const& a : run) {
      std::optional<buffer>& b = buffer_of(a);
      bool const release_now = is_send(a.kind) && (a.kind == action_kind::send_backward || release_sent_outputs);
      if (b && release_now && two_streams()) b->set_owner(transfer_);  // freed after the send, on its stream
      else if (b && (is_send(a.kind) || two_streams())) b->use_on(transfer_);
      if (is_recv(a.kind)) {
        if (two_streams()) {  // compute waits for it before the consumer, not here
          auto& pending = pending_of(a);
          if (!pending) pending.emplace();
          pending->event.emplace();
          pending->event->record(transfer_);
        }
      } else if (release_now) {
        release(b);
      }
    }
  }
  // Completes a posted receive just before the computation that reads it: on the host, the
  // transport's wait; with two streams, the compute stream's wait for the recv's event on the
  // device (so computations that do not need it go on while the transfer stream waits).
  void arrived(std::optional<pending_receive>& pending) {
    if (!pending) return;
    if (pending->ticket) transport_.wait(*pending->ticket);
    if (pending->event) pending->event->wait_on(compute_);
    pending.reset();
  }
  template <class Why>
  void abort_peers(Why&& why) noexcept {
    try {
      transport_.abort(why());
    } catch (...) {
      transport_.abort(std::string());  // no memory for the reason: abort without one
    }
  }

  Comm* comm_;
  Resource* resource_;
  transport<Comm> transport_;
  std::shared_ptr<counting_resource> counted_;  // at a fixed address, shared with results that keep outputs
  schedule schedule_;
  model_bytes bytes_;
  Stream compute_;
  Stream transfer_;
  int rank_ = 0;
};

}  // namespace headroom::pipeline
