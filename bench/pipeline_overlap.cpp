// SPDX-License-Identifier: Apache-2.0
// How much of the pipeline's overlap the executor keeps: the step time of one schedule's compute
// order under three ways of running its transfers, against the dataflow ideal of the same order
// (every computation starts as soon as its rank is free and its input has arrived).
//
//   in order, rendezvous   every transfer at its place in the list, a send done only when the
//                          peer's recv is posted (blocking NCCL-style p2p in list order)
//   in order, buffered     the same with sends that return at once (thread_group, eager MPI):
//                          a recv still blocks at its place, before computations that do not
//                          need it. This is how the executor ran before receives were deferred.
//   executor               what pipeline::executor does on thread ranks and MPI now: a receive
//                          posted at its place, waited on just before the computation that reads
//                          it; sends that complete without waiting for the peer
//
// Two measurements of each row:
//   model     a discrete-event simulation of the action lists (F = 1, B = 2, I = W = 1 time unit
//             per chunk, optionally stage 0 slower, a transfer latency); the ideal is computed
//             from the compute orders alone
//   threads   thread ranks with callbacks that sleep those durations (unit = 2 ms by default):
//             the executor over thread_group, the executor over the same group seen through a
//             wrapper that makes it issue transfers in list order, and a dataflow runner (no
//             executor: one thread per rank, condition variables) on the same compute order.
//             Medians of `reps` steps.
//
//   bench_pipeline_overlap [reps] [unit_us]       table, then one JSON line per row
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"
#include "pipeline_overlap_model.hpp"

namespace hp = headroom::pipeline;
using headroom::host::inline_stream;
using headroom::host::thread_communicator;

// A named namespace: clang warns about unused internal functions of the wrapper.
namespace pipeline_overlap {

// ---- thread ranks -------------------------------------------------------------------------

void busy(double units, std::chrono::microseconds unit) {
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(units * static_cast<double>(unit.count()))));
}

struct sleeping_stage {
  costs c;
  hp::placement where;
  std::chrono::microseconds unit;
  void run(hp::action_kind k, int stage) { busy(c.of({k, 0, stage, -1}, where), unit); }
  void forward(hp::forward_args<inline_stream> const& a) { run(hp::action_kind::forward, a.stage); }
  double loss(hp::loss_args<inline_stream> const&) { return 0; }
  void backward(hp::backward_args<inline_stream> const& a) { run(hp::action_kind::backward, a.stage); }
  void backward_input(hp::backward_args<inline_stream> const& a) { run(hp::action_kind::backward_input, a.stage); }
  void backward_weight(hp::weight_args<inline_stream> const& a) { run(hp::action_kind::backward_weight, a.stage); }
};

// thread_communicator under another type: the executor's default transport, which issues every
// transfer at its place in the list (the executor's behaviour before receives were deferred).
struct in_order_comm {
  using stream_type = inline_stream;
  thread_communicator* c;
  [[nodiscard]] int rank() const { return c->rank(); }
  [[nodiscard]] int size() const { return c->size(); }
  void barrier(inline_stream const& s) { c->barrier(s); }
  template <class T>
  void all_reduce(std::span<T const> in, std::span<T> out, headroom::reduce_op op, inline_stream const& s) { c->all_reduce(in, out, op, s); }
  template <class T>
  void all_gather(std::span<T const> in, std::span<T> out, inline_stream const& s) { c->all_gather(in, out, s); }
  template <class T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, headroom::reduce_op op, inline_stream const& s) { c->reduce_scatter(in, out, op, s); }
  template <class T>
  void broadcast(std::span<T> b, int root, inline_stream const& s) { c->broadcast(b, root, s); }
  template <class T>
  void send(std::span<T const> b, int peer, inline_stream const& s) { c->send(b, peer, s); }
  template <class T>
  void recv(std::span<T> b, int peer, inline_stream const& s) { c->recv(b, peer, s); }
  void abort() const noexcept { c->abort("in_order_comm"); }
};
static_assert(hp::byte_transport<in_order_comm>);

template <class Wrap>
double run_executor(hp::schedule const& s, costs const& c, std::chrono::microseconds unit, Wrap wrap) {
  auto const bytes = hp::model_bytes::uniform(s.shape(), {.activations = 64, .output = 64, .weight_stash = 64});
  double seconds = 0;
  headroom::host::launch(s.shape().stages, [&](thread_communicator& tc) {
    auto&& comm = wrap(tc);
    headroom::host::aligned_resource resource;
    hp::executor exec(comm, resource, s, bytes);
    sleeping_stage stage{c, s.placement(), unit};
    tc.barrier();
    auto const t0 = std::chrono::steady_clock::now();
    static_cast<void>(exec.step(stage));
    tc.barrier();
    if (tc.rank() == 0) seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  return seconds;
}

// One thread per rank runs its compute order, each computation waiting only for its input.
double run_dataflow(hp::schedule const& s, costs const& c, std::chrono::microseconds unit) {
  auto const& shape = s.shape();
  int const p = shape.stages;
  std::mutex mutex;
  std::condition_variable cv;
  std::map<key, bool> done;
  auto const start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < p; ++r)
      ranks.emplace_back([&, r] {
        for (auto const& a : s.actions(r)) {
          if (!hp::is_compute(a.kind)) continue;
          std::optional<key> need;
          if (a.kind == hp::action_kind::forward && a.stage > 0) need = key{true, a.microbatch, a.stage - 1};
          if ((a.kind == hp::action_kind::backward || a.kind == hp::action_kind::backward_input) && !shape.is_last(a.stage))
            need = key{false, a.microbatch, a.stage + 1};
          if (need) {
            std::unique_lock lock(mutex);
            cv.wait(lock, [&] { return done.count(*need) != 0; });
          }
          busy(c.of(a, s.placement()), unit);
          if (a.kind != hp::action_kind::backward_weight) {
            std::lock_guard lock(mutex);
            done[{a.kind == hp::action_kind::forward, a.microbatch, a.stage}] = true;
          }
          cv.notify_all();
        }
      });
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct row {
  std::string name;
  hp::schedule sched;
  costs c;
};

}  // namespace pipeline_overlap

int main(int argc, char** argv) {
  using namespace pipeline_overlap;
  int const reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::chrono::microseconds const unit(argc > 2 ? std::max(100, std::atoi(argv[2])) : 2000);
  costs const even{};
  costs slow0{};
  slow0.stage0 = 1.5;
  costs lat = even;
  lat.latency = 0.1;
  std::vector<row> rows{
      {"interleaved p=4 m=8 v=2", hp::make_schedule<hp::interleaved_1f1b>({.stages = 4, .microbatches = 8, .chunks = 2}), even},
      {"interleaved p=8 m=16 v=2", hp::make_schedule<hp::interleaved_1f1b>({.stages = 8, .microbatches = 16, .chunks = 2}), even},
      {"interleaved p=4 m=8 v=2, latency 0.1", hp::make_schedule<hp::interleaved_1f1b>({.stages = 4, .microbatches = 8, .chunks = 2}), lat},
      {"zb_h1 p=4 m=8, stage 0 x1.5", hp::make_schedule<hp::zb_h1>({.stages = 4, .microbatches = 8}), slow0},
      {"1f1b p=4 m=8, stage 0 x1.5", hp::make_schedule<hp::one_f_one_b>({.stages = 4, .microbatches = 8}), slow0},
      {"zb_h1 p=4 m=8", hp::make_schedule<hp::zb_h1>({.stages = 4, .microbatches = 8}), even},
      {"zbv p=4 m=8 v=2", hp::make_schedule<hp::zbv>({.stages = 4, .microbatches = 8, .chunks = 2}), even},
  };

  std::printf("pipeline overlap: step time of one compute order, transfers run three ways, vs the dataflow ideal\n");
  std::printf("model: time units (F = 1, B = 2, I = W = 1 per chunk); threads: ms, median of %d steps, unit %ld us\n\n", reps,
              static_cast<long>(unit.count()));
  std::printf("%-38s | %7s %9s %9s %9s %8s | %9s %9s %9s %8s %8s\n", "schedule", "ideal", "rendezv.", "buffered", "executor",
              "exec/id", "dataflow", "in order", "executor", "exec/df", "old/df");
  std::string json;
  for (auto const& r : rows) {
    double const id = ideal(r.sched, r.c);
    double const rv = simulate(r.sched, r.c, mode::rendezvous_in_order);
    double const bf = simulate(r.sched, r.c, mode::buffered_in_order);
    double const ex = simulate(r.sched, r.c, mode::deferred);
    std::vector<double> df_t, old_t, ex_t;
    for (int i = 0; i < reps; ++i) {
      df_t.push_back(run_dataflow(r.sched, r.c, unit));
      old_t.push_back(run_executor(r.sched, r.c, unit, [](thread_communicator& tc) { return in_order_comm{&tc}; }));
      ex_t.push_back(run_executor(r.sched, r.c, unit, [](thread_communicator& tc) -> thread_communicator& { return tc; }));
    }
    double const df = median(df_t) * 1e3, old = median(old_t) * 1e3, exm = median(ex_t) * 1e3;
    std::printf("%-38s | %7.1f %9.1f %9.1f %9.1f %8.3f | %9.1f %9.1f %9.1f %8.3f %8.3f\n", r.name.c_str(), id, rv, bf, ex, ex / id,
                df, old, exm, exm / df, old / df);
    json += "{\"bench\":\"pipeline_overlap\",\"schedule\":\"" + r.name + "\",\"model_ideal\":" + std::to_string(id) +
            ",\"model_rendezvous_in_order\":" + std::to_string(rv) + ",\"model_buffered_in_order\":" + std::to_string(bf) +
            ",\"model_executor\":" + std::to_string(ex) + ",\"threads_dataflow_ms\":" + std::to_string(df) +
            ",\"threads_in_order_ms\":" + std::to_string(old) + ",\"threads_executor_ms\":" + std::to_string(exm) +
            ",\"reps\":" + std::to_string(reps) + ",\"unit_us\":" + std::to_string(unit.count()) + "}\n";
  }
  std::printf("\nexec/id: the executor's model time over the ideal (target <= 1.02); exec/df and old/df: measured on threads,\n"
              "the executor now and in list order over the dataflow runner on the same order.\n\n%s",
              json.c_str());
  return 0;
}
