// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Compile-time positive and negative checks of the pipeline module's concepts and constraints.
#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"

namespace hp = headroom::pipeline;
using headroom::host::aligned_resource;
using headroom::host::inline_stream;
using headroom::host::thread_communicator;

namespace {

struct no_generate {
  static constexpr char const* name = "x";
};
struct wrong_result {
  static constexpr char const* name = "x";
  static int generate(hp::pipeline_shape const&) { return 0; }
};
struct custom_generator {  // any tag that returns a schedule is a generator
  static constexpr char const* name = "custom";
  static hp::schedule generate(hp::pipeline_shape const& s) { return hp::gpipe::generate(s); }
};

struct no_flags {
  static constexpr char const* name = "x";
};
struct keep_logits_only {
  static constexpr char const* name = "logits";
  static constexpr bool keeps_outputs = true;
  static constexpr bool keeps_losses = false;
};

struct whole {
  void forward(hp::forward_args<inline_stream> const&) {}
  double loss(hp::loss_args<inline_stream> const&) { return 0; }
  void backward(hp::backward_args<inline_stream> const&) {}
};
struct split : whole {
  void backward_input(hp::backward_args<inline_stream> const&) {}
  void backward_weight(hp::weight_args<inline_stream> const&) {}
};
struct void_loss {
  void forward(hp::forward_args<inline_stream> const&) {}
  void loss(hp::loss_args<inline_stream> const&) {}
  void backward(hp::backward_args<inline_stream> const&) {}
};
struct no_backward {
  void forward(hp::forward_args<inline_stream> const&) {}
  double loss(hp::loss_args<inline_stream> const&) { return 0; }
};
struct only_weight_half : whole {  // a split backward needs both halves
  void backward_weight(hp::weight_args<inline_stream> const&) {}
};
struct other_stream {
  void synchronize() const {}
  bool operator==(other_stream const&) const = default;
};

// A communicator that moves arithmetic types only: no std::byte transfers.
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

template <class Comm, class Resource>
concept makes_executor = requires { typename hp::executor<Comm, Resource>; };

}  // namespace

static_assert(hp::schedule_generator<hp::gpipe> && hp::schedule_generator<hp::one_f_one_b> &&
              hp::schedule_generator<hp::interleaved_1f1b> && hp::schedule_generator<hp::zb_h1>);
static_assert(hp::schedule_generator<custom_generator>);
static_assert(!hp::schedule_generator<no_generate> && !hp::schedule_generator<wrong_result> && !hp::schedule_generator<int>);

static_assert(hp::output_retention<hp::retention::all> && hp::output_retention<keep_logits_only>);
static_assert(!hp::output_retention<no_flags> && !hp::output_retention<int>);

static_assert(hp::pipeline_stage<whole, inline_stream> && !hp::split_backward_stage<whole, inline_stream>);
static_assert(hp::split_backward_stage<split, inline_stream>);
static_assert(!hp::pipeline_stage<void_loss, inline_stream> && !hp::pipeline_stage<no_backward, inline_stream>);
static_assert(!hp::split_backward_stage<only_weight_half, inline_stream>);
static_assert(!hp::pipeline_stage<whole, other_stream>);  // callbacks take the executor's stream type
static_assert(std::is_same_v<hp::loss_t<whole, inline_stream>, double>);

// Evaluation needs forward and loss only; a stage without backward is a forward_stage.
static_assert(hp::forward_stage<no_backward, inline_stream> && hp::forward_stage<whole, inline_stream>);
static_assert(!hp::forward_stage<void_loss, inline_stream>);
static_assert(hp::schedule_generator<hp::forward_only> && hp::schedule_generator<hp::interleaved_zb>);
static_assert(hp::output_lifetime<hp::outputs::freed_when_sent> && hp::output_lifetime<hp::outputs::kept_until_backward>);
static_assert(!hp::output_lifetime<hp::retention::all> && !hp::output_lifetime<int>);

// A kept output holds a share of the resource it returns to and gives its block back exactly
// once: movable, never copyable (a copy would free the block twice).
using kept = hp::kept_output<hp::executor<thread_communicator, aligned_resource>::buffer>;
static_assert(std::movable<kept> && !std::copyable<kept> && !std::is_copy_constructible_v<kept>);
static_assert(std::is_nothrow_move_assignable_v<kept> && std::is_nothrow_move_constructible_v<kept>);
// Thread ranks defer receives to their consumer; a communicator the executor knows nothing
// about gets transfers in list order.
static_assert(hp::transport<thread_communicator>::defers_receives);

static_assert(hp::byte_transport<thread_communicator>);
static_assert(headroom::communicator<arithmetic_only_comm> && !hp::byte_transport<arithmetic_only_comm>);
static_assert(makes_executor<thread_communicator, aligned_resource>);
// A communicator without byte transfers or a non-resource stops at a sentence, a hard error:
// tests/pipeline/compile_fail/executor_*.cpp.

TEST_CASE("a custom retention tag and a custom generator work end to end") {
  auto const s = hp::make_schedule<custom_generator>({.stages = 2, .microbatches = 3});
  CHECK(s == hp::make_schedule<hp::gpipe>({.stages = 2, .microbatches = 3}));
  auto const bytes = hp::model_bytes::uniform(s.shape(), {.activations = 16, .output = 32});
  auto const all = hp::predict_memory(s, bytes, hp::retention::all{});
  auto const logits = hp::predict_memory(s, bytes, keep_logits_only{});
  CHECK(logits.rank(1).held_at_end == all.rank(1).held_at_end);
  CHECK(logits.rank(1).held_at_end == 3 * 32);
  CHECK(logits.retention() == "logits");
}
