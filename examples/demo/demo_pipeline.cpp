// SPDX-License-Identifier: Apache-2.0
// demo_pipeline: a pipeline step on four thread ranks. The schedule is printed as a timeline;
// the memory model predicts each stage's peak before the step, and the executor's counters
// measure it, once keeping every micro-batch's logits on the last stage (retention::all,
// PyTorch's default) and once keeping none (retention::none).
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/core.hpp"
#include "headroom/host.hpp"
#include "headroom/pipeline.hpp"
#include "sections.hpp"

namespace hp = headroom::pipeline;
using headroom::MiB;
using headroom::host::inline_stream;

namespace {

// A stage that only fills its outputs: the demo is about where the bytes are, not the math.
struct filling_stage {
  void forward(hp::forward_args<inline_stream> const& a) {
    if (!a.output.empty()) a.output.front() = static_cast<std::byte>(a.microbatch);
  }
  int loss(hp::loss_args<inline_stream> const& a) { return static_cast<int>(a.output.front()); }
  void backward(hp::backward_args<inline_stream> const& a) {
    if (!a.grad_input.empty()) a.grad_input.front() = std::byte{1};
  }
};

std::string mib(std::int64_t bytes) { return headroom::format_bytes(static_cast<std::uint64_t>(bytes)); }

// Runs one step on `stages` thread ranks and returns each rank's measured peak.
template <class R>
std::vector<std::int64_t> measure(hp::schedule const& sched, hp::model_bytes const& bytes) {
  std::vector<std::int64_t> peaks(static_cast<std::size_t>(sched.shape().stages));
  std::mutex m;
  headroom::host::launch(sched.shape().stages, [&](headroom::host::thread_communicator& comm) {
    headroom::host::aligned_resource memory;
    hp::executor exec(comm, memory, sched, bytes);
    filling_stage stage;
    auto result = exec.step(stage, R{});
    std::lock_guard lock(m);
    peaks[static_cast<std::size_t>(comm.rank())] = exec.statistics().bytes().peak;
  });
  return peaks;
}

}  // namespace

void demo_pipeline(headroom::demo::printer& p) {
  p.section("pipeline: 1F1B on 4 thread ranks, predicted vs measured memory per stage");
  constexpr int stages = 4;
  constexpr int microbatches = 8;
  hp::pipeline_shape const shape{.stages = stages, .microbatches = microbatches};
  auto const sched = hp::make_schedule<hp::one_f_one_b>(shape);

  std::istringstream lines(hp::timeline(hp::make_schedule<hp::one_f_one_b>({.stages = stages, .microbatches = 6})));
  p.line("timeline of 1F1B, p = 4, m = 6 (one column per unit of compute, '.' = bubble):");
  for (std::string line; std::getline(lines, line);) p.line("  ", line);
  p.line("");

  // A toy LM: 4 MiB of saved activations and a 1 MiB hidden state per micro-batch and stage;
  // the last stage's output is the logits, 8 MiB per micro-batch.
  std::vector<hp::stage_bytes> per_stage(stages, {.activations = 4 * MiB, .output = 1 * MiB, .parameters = 64 * MiB});
  per_stage.back().output = 8 * MiB;
  hp::model_bytes const bytes(per_stage);

  auto const plan_all = hp::predict_memory(sched, bytes, hp::retention::all{});
  auto const plan_none = hp::predict_memory(sched, bytes, hp::retention::none{});
  auto const got_all = measure<hp::retention::all>(sched, bytes);
  auto const got_none = measure<hp::retention::none>(sched, bytes);

  headroom::demo::table t{"stage", "predicted (all)", "measured (all)", "predicted (none)", "measured (none)", "+ parameters"};
  bool exact = true;
  for (int r = 0; r < stages; ++r) {
    auto const i = static_cast<std::size_t>(r);
    t.row(r, mib(plan_all.rank(r).peak), mib(got_all[i]), mib(plan_none.rank(r).peak), mib(got_none[i]),
          mib(plan_none.rank(r).parameters));
    exact = exact && plan_all.rank(r).peak == got_all[i] && plan_none.rank(r).peak == got_none[i];
  }
  p.print(t);
  p.check(exact, "the memory model predicts every stage's peak to the byte, for both policies");
  auto const held = plan_all.rank(stages - 1).held_at_end;
  p.check(held == static_cast<std::int64_t>(microbatches * 8 * MiB) && plan_none.rank(stages - 1).held_at_end == 0,
          "retention::all still holds m x 8 MiB of logits when the step returns (", mib(held), "); none holds nothing");
  p.check(plan_all.max_rank().rank == stages - 1 && plan_none.max_rank().rank != stages - 1,
          "keeping the outputs moves the pipeline's peak to the last stage (", mib(plan_all.max_rank().total()), " vs ",
          mib(plan_none.max_rank().total()), " on stage ", plan_none.max_rank().rank, ")");

  // Query first: the last stage against the micro-batch count, before anything runs.
  headroom::demo::table sweep{"m", "last stage (all)", "last stage (none)", "stage 0"};
  std::int64_t none_first = -1;
  bool flat = true;
  for (int m : {2, 4, 8, 16}) {
    auto const s = hp::make_schedule<hp::one_f_one_b>({.stages = stages, .microbatches = m});
    auto const all = hp::predict_memory(s, bytes, hp::retention::all{});
    auto const none = hp::predict_memory(s, bytes, hp::retention::none{});
    sweep.row(m, mib(all.rank(stages - 1).total()), mib(none.rank(stages - 1).total()), mib(none.rank(0).total()));
    if (none_first < 0) none_first = none.rank(stages - 1).total();
    flat = flat && none.rank(stages - 1).total() == none_first;
  }
  p.line("");
  p.line("predicted totals (parameters included) as the micro-batch count grows; a torchtitan user reported");
  p.line("the last stage growing like this on PyTorch's forum (discuss.pytorch.org):");
  p.print(sweep);
  p.check(flat, "with retention::none the last stage does not grow with m");
}
