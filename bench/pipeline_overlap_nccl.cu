// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// The overlapped pipeline executor on NCCL, p = --stages (default 2): one process drives p GPUs
// (one host thread each, nccl::launch_per_device's in-process bootstrap), every computation a
// kernel of known duration (it spins on the GPU's global timer for cost x unit: F = 1, B = 2,
// I = W = 1 units, rank 0 optionally x1.5, the costs of bench/pipeline_overlap.cpp), activations
// and gradients real NCCL p2p transfers of --kib KiB on the executor's transfer stream.
//
// Per schedule (1F1B, ZB-H1 and interleaved 1F1B with v = 2, m = 8; from p = 3 on also ZB-V, the
// V placement with v = 2: p = 2 keeps the rows and checks it always had), stream set-up
// (separate compute and transfer streams, or one stream for both) and transfer grouping (each
// transfer on its own, or each run of consecutive transfers as one ncclGroupStart/End batch):
//   ideal      the dataflow ideal of the same compute order (pipeline_overlap::ideal on the
//              discrete-event model, transfers free), in ms at the given unit
//   model      the model's executor time (pipeline_overlap::simulate, receives deferred) and, for
//              one stream, its rendezvous-in-order time (a send waits for the peer's receive)
//   measured   median over --reps steps (after 2 warm-ups) of the host wall time from every rank
//              leaving an NCCL barrier to every rank's streams drained (max end - min start)
//   ratio      measured / ideal
// The four set-ups of a schedule share one set of communicators (one launch_per_device).
// At p = 2, m = 8 the model gives (units): 1F1B 27, ZB-H1 25; stage 0 x1.5: 37.5 and 36.5 (ideal
// and executor alike; rendezvous in order 38 and 37). At p = 4, m = 8: 1F1B 33, ZB-H1 27,
// interleaved v = 2 57, ZB-V 51; rank 0 x1.5: 40.5 and 37.5.
// Checks (exit 1 when one fails):
//   - a spin of one unit takes one unit (CUDA events, within 5 %): the durations are known;
//   - two streams: measured / ideal <= --max-ratio (default 1.15) for every schedule and grouping;
//   - one rank on another schedule than the rest (1F1B against ZB-H1; 1F1B m = 8 against m = 6;
//     from p = 3, interleaved v = 2 against ZB-V on a middle rank) raises collective_mismatch on
//     every GPU within 10 s, not a hang.
// Output: a table, the mismatch cases, one JSON line per row, then (last, compact) measured / ideal
// per row and set-up, the PASS/FAIL lines and one verdict line "pipeline_overlap_nccl p=P: PASS
// (n of n checks)". The JSON also goes to $OUT/pipeline_overlap_nccl.json when OUT is set
// ($OUT/pipeline_overlap_nccl_p<P>.json for p other than 2).
//
//   bench_pipeline_overlap_nccl [--stages 2] [--reps 10] [--unit-us 1000] [--kib 1024]
//                               [--microbatches 8] [--max-ratio 1.15]
// tools/gpu-check also runs it with --stages 4 when the machine has 4 GPUs (the line below).
// headroom: on 4 GPUs also --stages 4
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/pipeline/cuda.hpp"
#include "pipeline_overlap_model.hpp"

namespace cu = headroom::cuda;
namespace nc = headroom::nccl;
namespace hp = headroom::pipeline;
using cu::stream_view;
using pipeline_overlap::costs;

namespace {

// Keeps the device busy for `ns` nanoseconds of its global timer.
__global__ void spin(unsigned long long ns) {
  auto const now = [] {
    unsigned long long t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  };
  unsigned long long const start = now();
  while (now() - start < ns) {
  }
}

void spin_on(double units, double unit_ns, stream_view s) {
  spin<<<1, 1, 0, s.get()>>>(static_cast<unsigned long long>(units * unit_ns));
  HEADROOM_CUDA_TRY(cudaGetLastError());
}

// Every computation is a spin of its cost; the executor's buffers are left as they are (their
// bytes still cross NCCL). loss() returns a device slot, as a real last stage does.
struct timed_stage {
  costs c;
  hp::placement where;
  double unit_ns;
  hp::cuda::device_values<double>* losses;
  void run(hp::action_kind k, int stage, stream_view s) const { spin_on(c.of({k, 0, stage, -1}, where), unit_ns, s); }
  void forward(hp::forward_args<stream_view> const& a) { run(hp::action_kind::forward, a.stage, a.stream); }
  double* loss(hp::loss_args<stream_view> const& a) { return losses->at(a.microbatch); }
  void backward(hp::backward_args<stream_view> const& a) { run(hp::action_kind::backward, a.stage, a.stream); }
  void backward_input(hp::backward_args<stream_view> const& a) { run(hp::action_kind::backward_input, a.stage, a.stream); }
  void backward_weight(hp::weight_args<stream_view> const& a) { run(hp::action_kind::backward_weight, a.stage, a.stream); }
};
static_assert(hp::split_backward_stage<timed_stage, stream_view>);

struct options {
  int stages = 2;
  int reps = 10;
  int unit_us = 1000;
  int kib = 1024;
  int microbatches = 8;
  double max_ratio = 1.15;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

using clock_type = std::chrono::steady_clock;

// One stream set-up and transfer grouping of a row.
struct setup {
  bool two_streams;
  bool grouped;
};
constexpr setup setups[] = {{true, false}, {true, true}, {false, false}, {false, true}};
constexpr std::size_t setup_count = std::size(setups);

// Median makespan (ms) of `reps` steps of `sched` on p GPUs, per set-up (in `setups`' order), all
// on one set of communicators.
std::vector<double> measure(hp::schedule const& sched, costs const& c, options const& o) {
  auto const& shape = sched.shape();
  auto const p = static_cast<std::size_t>(shape.stages);
  std::size_t const bytes = static_cast<std::size_t>(o.kib) * 1024;
  auto const model = hp::model_bytes::uniform(shape, {.activations = bytes, .output = bytes, .weight_stash = bytes});
  double const unit_ns = o.unit_us * 1e3;
  int const warmup = 2;
  auto const reps = static_cast<std::size_t>(o.reps);
  // [set-up][rep][rank]
  std::vector<std::vector<std::vector<clock_type::time_point>>> start(
      setup_count, std::vector<std::vector<clock_type::time_point>>(reps, std::vector<clock_type::time_point>(p)));
  auto end = start;
  nc::launch_per_device(nc::first_devices(shape.stages), [&](nc::communicator& comm) {
    cu::async_resource memory(comm.device());
    cu::stream compute;
    cu::stream transfer;
    hp::cuda::device_values<double> losses(memory, compute, shape.microbatches);
    timed_stage stage{c, sched.placement(), unit_ns, &losses};
    auto const r = static_cast<std::size_t>(comm.rank());
    for (std::size_t k = 0; k < setup_count; ++k) {
      hp::cuda::nccl_executor<> exec(comm, memory, sched, model, compute, setups[k].two_streams ? transfer.view() : compute.view());
      for (int i = 0; i < warmup + o.reps; ++i) {
        comm.barrier(compute);
        compute.synchronize();
        auto const t0 = clock_type::now();
        if (setups[k].grouped)
          static_cast<void>(exec.step(stage, hp::retention::none{}, hp::outputs::freed_when_sent{}, hp::transfers::grouped{}));
        else
          static_cast<void>(exec.step(stage, hp::retention::none{}, hp::outputs::freed_when_sent{}, hp::transfers::one_by_one{}));
        compute.synchronize();
        transfer.synchronize();
        auto const t1 = clock_type::now();
        if (i >= warmup) {
          start[k][static_cast<std::size_t>(i - warmup)][r] = t0;
          end[k][static_cast<std::size_t>(i - warmup)][r] = t1;
        }
      }
    }
  });
  std::vector<double> out;
  for (std::size_t k = 0; k < setup_count; ++k) {
    std::vector<double> ms;
    for (std::size_t i = 0; i < reps; ++i) {
      auto const& s = start[k][i];
      auto const& e = end[k][i];
      ms.push_back(std::chrono::duration<double, std::milli>(*std::max_element(e.begin(), e.end()) -
                                                             *std::min_element(s.begin(), s.end()))
                       .count());
    }
    out.push_back(median(ms));
  }
  return out;
}

// Median duration (ms) of a one-unit spin on device 0, by CUDA events.
double spin_unit_ms(options const& o) {
  cu::scoped_device on(0);
  cu::stream s;
  cudaEvent_t a = nullptr, b = nullptr;
  HEADROOM_CUDA_TRY(cudaEventCreate(&a));
  HEADROOM_CUDA_TRY(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < 12; ++i) {
    HEADROOM_CUDA_TRY(cudaEventRecord(a, s.view().get()));
    spin_on(1.0, o.unit_us * 1e3, s);
    HEADROOM_CUDA_TRY(cudaEventRecord(b, s.view().get()));
    HEADROOM_CUDA_TRY(cudaEventSynchronize(b));
    float t = 0;
    HEADROOM_CUDA_TRY(cudaEventElapsedTime(&t, a, b));
    if (i >= 2) ms.push_back(t);
  }
  HEADROOM_CUDA_TRY(cudaEventDestroy(a));
  HEADROOM_CUDA_TRY(cudaEventDestroy(b));
  return median(ms);
}

struct mismatch_result {
  int raised = 0;  // ranks that got collective_mismatch
  double seconds = 0;
  std::string message;  // rank 0's
  std::string other;    // anything else that came out of launch_per_device
};

// Rank `odd` builds its executor on `b`, every other rank on `a` (p = a's stages GPUs): every rank
// must raise collective_mismatch.
mismatch_result mismatched(hp::schedule const& a, hp::schedule const& b, int odd, options const& o) {
  mismatch_result out;
  std::mutex mutex;
  std::size_t const bytes = static_cast<std::size_t>(o.kib) * 1024;
  auto const t0 = clock_type::now();
  try {
    nc::launch_per_device(nc::first_devices(a.shape().stages), [&](nc::communicator& comm) {
      cu::async_resource memory(comm.device());
      cu::stream s;
      auto const& sched = comm.rank() == odd ? b : a;
      auto const model = hp::model_bytes::uniform(sched.shape(), {.activations = bytes, .output = bytes, .weight_stash = bytes});
      try {
        hp::cuda::nccl_executor<> exec(comm, memory, sched, model, s, s);
      } catch (headroom::collective_mismatch const& e) {
        std::lock_guard lock(mutex);
        ++out.raised;
        if (comm.rank() == 0) out.message = e.what();
      }
    });
  } catch (std::exception const& e) {
    out.other = e.what();
  }
  out.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return out;
}

std::string json_escape(std::string const& s) {
  std::string r;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') r += '\\';
    if (ch == '\n') {
      r += "\\n";
      continue;
    }
    r += ch;
  }
  return r;
}

int parse_int(char const* flag, char const* v) {
  char* end = nullptr;
  long const x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x <= 0) {
    std::fprintf(stderr, "%s: expected a positive integer, got '%s'\n", flag, v);
    std::exit(2);
  }
  return static_cast<int>(x);
}

}  // namespace

int bench_main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s [--stages P] [--reps N] [--unit-us N] [--kib N] [--microbatches N] [--max-ratio X]\n",
                   argv[0]);
      return 2;
    }
    char const* v = argv[++i];
    if (a == "--stages") o.stages = parse_int("--stages", v);
    else if (a == "--reps") o.reps = parse_int("--reps", v);
    else if (a == "--unit-us") o.unit_us = parse_int("--unit-us", v);
    else if (a == "--kib") o.kib = parse_int("--kib", v);
    else if (a == "--microbatches") o.microbatches = parse_int("--microbatches", v);
    else if (a == "--max-ratio") o.max_ratio = std::atof(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  int const p = o.stages;
  if (p < 2) {
    std::fprintf(stderr, "--stages: expected at least 2 (one GPU a stage), got %d\n", p);
    return 2;
  }
  int const devices = cu::device_count();
  if (devices < p) {
    std::printf("skipped: needs %d GPUs, found %d\n", p, devices);
    return 77;
  }
  cudaDeviceProp prop{};
  HEADROOM_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));

  costs const even{};
  costs slow0{};
  slow0.stage0 = 1.5;
  int const m = o.microbatches;
  std::string const pm = " p=" + std::to_string(p) + " m=" + std::to_string(m);
  struct row {
    std::string name;
    hp::schedule sched;
    costs c;
  };
  std::vector<row> rows{
      {"1f1b" + pm, hp::make_schedule<hp::one_f_one_b>({.stages = p, .microbatches = m}), even},
      {"zb_h1" + pm, hp::make_schedule<hp::zb_h1>({.stages = p, .microbatches = m}), even},
      {"1f1b" + pm + ", stage 0 x1.5", hp::make_schedule<hp::one_f_one_b>({.stages = p, .microbatches = m}), slow0},
      {"zb_h1" + pm + ", stage 0 x1.5", hp::make_schedule<hp::zb_h1>({.stages = p, .microbatches = m}), slow0},
      {"interleaved" + pm + " v=2", hp::make_schedule<hp::interleaved_1f1b>({.stages = p, .microbatches = m, .chunks = 2}), even},
  };
  if (p > 2) rows.push_back({"zbv" + pm + " v=2", hp::make_schedule<hp::zbv>({.stages = p, .microbatches = m, .chunks = 2}), even});

  std::vector<std::pair<std::string, bool>> checks;
  double const unit_ms = o.unit_us / 1e3;
  double const spin_ms = spin_unit_ms(o);
  checks.emplace_back("a one-unit spin takes " + std::to_string(spin_ms) + " ms for " + std::to_string(unit_ms) + " ms (within 5 %)",
                      spin_ms >= unit_ms * 0.95 && spin_ms <= unit_ms * 1.05);

  std::printf("pipeline executor on NCCL, p = %d, %s x%d; unit %d us (F = 1, B = 2, I = W = 1), %d KiB per transfer, "
              "median of %d steps\n\n",
              p, prop.name, p, o.unit_us, o.kib, o.reps);
  std::printf("%-28s %-7s %-10s | %9s %9s %9s | %9s %7s %9s\n", "schedule", "streams", "transfers", "ideal ms", "model ms",
              "rdv. ms", "measured", "/ideal", "/model");
  std::string json;
  std::vector<double> ideals;
  std::vector<std::vector<double>> ratios;  // [row][set-up]
  std::string const stages_json = ",\"stages\":" + std::to_string(p);
  for (auto const& r : rows) {
    double const ideal = pipeline_overlap::ideal(r.sched, r.c) * unit_ms;
    double const model = pipeline_overlap::simulate(r.sched, r.c, pipeline_overlap::mode::deferred) * unit_ms;
    double const rendezvous = pipeline_overlap::simulate(r.sched, r.c, pipeline_overlap::mode::rendezvous_in_order) * unit_ms;
    ideals.push_back(ideal);
    ratios.emplace_back(setup_count, std::nan(""));
    std::vector<double> measured;
    try {  // a row that fails is a failed check; the other rows and the mismatch cases still run
      measured = measure(r.sched, r.c, o);
    } catch (std::exception const& e) {
      std::printf("%-28s failed: %s\n", r.name.c_str(), e.what());
      checks.emplace_back(r.name + ": the step failed: " + e.what(), false);
      continue;
    }
    ratios.back().clear();
    for (std::size_t k = 0; k < setup_count; ++k) {
      bool const two = setups[k].two_streams;
      double const got = measured[k];
      double const ratio = got / ideal;
      ratios.back().push_back(ratio);
      std::string const transfers = setups[k].grouped ? "grouped" : "one_by_one";
      std::printf("%-28s %-7s %-10s | %9.2f %9.2f %9.2f | %9.2f %7.3f %9.3f\n", r.name.c_str(), two ? "two" : "one",
                  transfers.c_str(), ideal, model, rendezvous, got, ratio, got / model);
      if (two)
        checks.emplace_back(r.name + ", two streams, " + transfers + ": measured / ideal " + std::to_string(ratio) + " <= " +
                                std::to_string(o.max_ratio),
                            ratio <= o.max_ratio);
      json += "{\"bench\":\"pipeline_overlap_nccl\",\"device\":\"" + json_escape(prop.name) + "\"" + stages_json + ",\"schedule\":\"" +
              r.name + "\",\"streams\":" + (two ? "2" : "1") + ",\"transfers\":\"" + transfers +
              "\",\"unit_us\":" + std::to_string(o.unit_us) + ",\"kib\":" + std::to_string(o.kib) +
              ",\"reps\":" + std::to_string(o.reps) + ",\"ideal_ms\":" + std::to_string(ideal) +
              ",\"model_executor_ms\":" + std::to_string(model) + ",\"model_rendezvous_ms\":" + std::to_string(rendezvous) +
              ",\"measured_ms\":" + std::to_string(got) + ",\"measured_over_ideal\":" + std::to_string(ratio) + "}\n";
    }
  }

  std::printf("\nmismatched schedules across the %d ranks:\n", p);
  struct mismatch_case {
    std::string name;
    hp::schedule a, b;  // every rank on a but `odd`, on b
    int odd;
  };
  int const m2 = std::max(1, m - 2);
  // "rank 0 A, rank 1 B" at p = 2 (the names this bench always had); "rank K B, the other p-1 A"
  auto const named = [&](std::string const& a, std::string const& b, int odd) {
    return p == 2 ? "rank 0 " + a + ", rank 1 " + b
                  : "rank " + std::to_string(odd) + " " + b + ", the other " + std::to_string(p - 1) + " " + a;
  };
  std::vector<mismatch_case> cases{
      {named("1f1b", "zb_h1", p - 1) + " (m=" + std::to_string(m) + ")",
       hp::make_schedule<hp::one_f_one_b>({.stages = p, .microbatches = m}), hp::make_schedule<hp::zb_h1>({.stages = p, .microbatches = m}),
       p - 1},
      {named("1f1b m=" + std::to_string(m), "1f1b m=" + std::to_string(m2), p - 1),
       hp::make_schedule<hp::one_f_one_b>({.stages = p, .microbatches = m}),
       hp::make_schedule<hp::one_f_one_b>({.stages = p, .microbatches = m2}), p - 1},
  };
  if (p > 2)
    cases.push_back({named("interleaved v=2", "zbv", 1) + " (m=" + std::to_string(m) + ")",
                     hp::make_schedule<hp::interleaved_1f1b>({.stages = p, .microbatches = m, .chunks = 2}),
                     hp::make_schedule<hp::zbv>({.stages = p, .microbatches = m, .chunks = 2}), 1});
  std::string const ranks_word = p == 2 ? "both ranks" : "all " + std::to_string(p) + " ranks";
  for (auto const& mc : cases) {
    auto const r = mismatched(mc.a, mc.b, mc.odd, o);
    std::printf("  %-40s raised on %d of %d ranks in %.2f s%s%s\n", mc.name.c_str(), r.raised, p, r.seconds,
                r.message.empty() ? "" : ": ", r.message.substr(0, 160).c_str());
    if (!r.other.empty()) std::printf("    other error: %s\n", r.other.c_str());
    checks.emplace_back(mc.name + ": collective_mismatch on " + ranks_word + " within 10 s (" + std::to_string(r.raised) + " ranks, " +
                            std::to_string(r.seconds) + " s)",
                        r.raised == p && r.seconds < 10.0 && r.other.empty());
    json += "{\"bench\":\"pipeline_overlap_nccl\"" + stages_json + ",\"mismatch\":\"" + json_escape(mc.name) +
            "\",\"ranks_raised\":" + std::to_string(r.raised) + ",\"seconds\":" + std::to_string(r.seconds) + "}\n";
  }

  // Last, compact: the JSON lines (tools/gpu-check collects them), the ratios per row, the checks.
  std::printf("\n%s\nideal: the dataflow ideal of the same compute order (bench/pipeline_overlap.cpp's model, transfers free);\n"
              "model: the model's executor; rdv.: the model's in-order rendezvous transfers (what one stream can approach)\n\n",
              json.c_str());
  std::printf("measured / ideal, p = %d:\n%-32s %9s | %9s %9s | %9s %9s\n", p, "schedule", "ideal ms", "two 1by1", "two grp",
              "one 1by1", "one grp");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::printf("%-32s %9.2f |", rows[i].name.c_str(), ideals[i]);
    for (std::size_t k = 0; k < setup_count; ++k) std::printf(" %9.3f%s", ratios[i][k], k == 1 ? " |" : "");
    std::printf("\n");
  }
  bool ok = true;
  int passed = 0;
  std::printf("\n");
  for (auto const& [text, pass] : checks) {
    std::printf("%s  %s\n", pass ? "PASS" : "FAIL", text.c_str());
    ok = ok && pass;
    passed += pass ? 1 : 0;
  }
  std::printf("pipeline_overlap_nccl p=%d: %s (%d of %zu checks)\n", p, ok ? "PASS" : "FAIL", passed, checks.size());
  if (char const* out = std::getenv("OUT"); out != nullptr && *out != '\0') {
    std::ofstream f(std::string(out) + (p == 2 ? "/pipeline_overlap_nccl.json" : "/pipeline_overlap_nccl_p" + std::to_string(p) + ".json"));
    f << json;
  }
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  try {
    return bench_main(argc, argv);
  } catch (std::exception const& e) {
    std::printf("FAIL  %s\n", e.what());
    return 1;
  }
}
