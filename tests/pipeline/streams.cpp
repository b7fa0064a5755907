// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// The executor with separate compute and transfer streams, on lifetime/manual.hpp's streams
// whose work runs only when the test advances them (one timeline per rank). The stage and the
// transfers are deferred work, so this checks on a CPU what the GPU backend relies on:
//   - step() issues everything without the host waiting on any stream;
//   - a sent buffer is freed in stream order after its send ran (manual::resource would hand the
//     block to the next allocation otherwise, and the peer would receive overwritten data);
//   - received data reaches the callbacks only after the recv ran.
// The gradients, computed when the streams run, are bit-equal to the single-rank reference.
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "headroom/host/thread_group.hpp"
#include "headroom/lifetime/manual.hpp"
#include "headroom/pipeline.hpp"
#include "toy_model.hpp"

namespace hp = headroom::pipeline;
namespace manual = headroom::lifetime::manual;
using headroom::host::thread_communicator;

namespace {

// A thread_group rank whose point-to-point transfers run as work on a manual stream.
class deferred_comm {
 public:
  using stream_type = manual::stream;
  deferred_comm(thread_communicator inner, manual::timeline& t) : inner_(std::move(inner)), timeline_(&t) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  void barrier(stream_type const&) { inner_.barrier(); }
  template <class T> void all_reduce(std::span<T const> in, std::span<T> out, headroom::reduce_op op, stream_type const&) { inner_.all_reduce(in, out, op); }
  template <class T> void all_gather(std::span<T const> in, std::span<T> out, stream_type const&) { inner_.all_gather(in, out); }
  template <class T> void reduce_scatter(std::span<T const> in, std::span<T> out, headroom::reduce_op op, stream_type const&) { inner_.reduce_scatter(in, out, op); }
  template <class T> void broadcast(std::span<T> buf, int root, stream_type const&) { inner_.broadcast(buf, root); }
  template <class T>
  void send(std::span<T const> data, int peer, stream_type const& s) {
    timeline_->submit(s, [this, data, peer] { inner_.send(data, peer); });
  }
  template <class T>
  void recv(std::span<T> data, int peer, stream_type const& s) {
    timeline_->submit(s, [this, data, peer] { inner_.recv(data, peer); });
  }

 private:
  thread_communicator inner_;
  manual::timeline* timeline_;
};
static_assert(hp::byte_transport<deferred_comm>);

// The toy stage, its work issued to the stream instead of run; the loss is a handle filled
// when the stream gets there (as a device scalar would be).
struct deferred_stage {
  toy::stage<manual::stream> inner;
  manual::timeline* t;
  void forward(hp::forward_args<manual::stream> const& a) { t->submit(a.stream, [this, a] { inner.forward(a); }); }
  std::shared_ptr<double> loss(hp::loss_args<manual::stream> const& a) {
    auto value = std::make_shared<double>(-1.0);
    t->submit(a.stream, [this, a, value] { *value = inner.loss(a); });
    return value;
  }
  void backward(hp::backward_args<manual::stream> const& a) { t->submit(a.stream, [this, a] { inner.backward(a); }); }
  void backward_input(hp::backward_args<manual::stream> const& a) { t->submit(a.stream, [this, a] { inner.backward_input(a); }); }
  void backward_weight(hp::weight_args<manual::stream> const& a) { t->submit(a.stream, [this, a] { inner.backward_weight(a); }); }
};

template <class G>
void check_two_streams(hp::pipeline_shape const& shape) {
  CAPTURE(shape);
  toy::dims const d{.width = 5, .rows = 2};
  auto const sched = hp::make_schedule<G>(shape);
  auto const bytes = hp::model_bytes::uniform(shape, toy::stage_cost(d));
  auto const ref = toy::run_reference(d, shape.virtual_stages(), shape.microbatches, toy::weight_order(sched));
  std::map<int, toy::params> got;
  std::vector<double> losses;
  std::mutex mutex;
  headroom::host::launch(shape.stages, [&](thread_communicator& tc) {
    manual::timeline t;
    auto const compute = t.make_stream("compute");
    auto const transfer = t.make_stream("transfer");
    manual::resource memory(t);
    deferred_comm comm(tc, t);
    deferred_stage stage{{.d = d, .chunks = {}, .backward_order = {}}, &t};
    for (int c = 0; c < shape.chunks; ++c) {
      int const s = shape.virtual_stage(comm.rank(), c);
      stage.inner.chunks.emplace(s, toy::make_params(d, s));
    }
    hp::executor<deferred_comm, manual::resource> exec(comm, memory, sched, bytes, compute, transfer);
    auto result = exec.step(stage, hp::retention::reduced{});
    CHECK(t.host_waits() == 0);     // step() issued everything without waiting
    CHECK(t.pending(compute) > 0);  // ... and nothing has run yet
    t.run_all();
    CHECK(t.pending(compute) == 0);
    CHECK(t.pending(transfer) == 0);
    CHECK(t.host_waits() == 0);
    CHECK(memory.refused_frees() == 0);
    CHECK(memory.usage().used_current == 0);  // every buffer came back, in stream order
    CHECK(exec.statistics().bytes().value == 0);
    std::lock_guard lock(mutex);
    for (auto& [s, p] : stage.inner.chunks) got[s] = p;
    for (auto const& v : result.losses) losses.push_back(*v);
  });
  for (int s = 0; s < shape.virtual_stages(); ++s) {
    CAPTURE(s);
    auto const& r = ref.stages[static_cast<std::size_t>(s)];
    CHECK(std::memcmp(got.at(s).dw.data(), r.dw.data(), r.dw.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(got.at(s).db.data(), r.db.data(), r.db.size() * sizeof(float)) == 0);
  }
  CHECK(losses == ref.losses);
}

}  // namespace

TEST_CASE("two streams, deferred work: ordered frees, no host wait, bit-equal gradients") {
  for (int p : {2, 3})
    for (int m : {1, 4, 6}) {
      check_two_streams<hp::one_f_one_b>({.stages = p, .microbatches = m});
      check_two_streams<hp::gpipe>({.stages = p, .microbatches = m, .chunks = 2});
      check_two_streams<hp::zb_h1>({.stages = p, .microbatches = m});
    }
  check_two_streams<hp::interleaved_1f1b>({.stages = 2, .microbatches = 4, .chunks = 2});
}
