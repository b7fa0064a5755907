// SPDX-License-Identifier: Apache-2.0
// Cost of recording allocator events on the host (trace/recorder.hpp), against the target of
// 15 ns an event (timestamps on) and two threads at most 1.5x one thread.
//
//   bench_trace_record [--events N] [--repeats R] [--pytorch-ns X]    table, then one JSON line
//
// Each row is the median of R runs (default 5), in the measuring thread's CPU time. --pytorch-ns: PyTorch's recorder cost per event
// measured on this host in the same session (bench/trace_record_torch.py passes it); the ratio
// is printed only then.
//
// Rows (one thread; each iteration is an alloc of one of 4096 addresses and the free of the one
// allocated 2048 iterations earlier, so the live table holds 2048 blocks as in a training step;
// the ring has 100 000 entries and wraps):
//   hooks, recording         recorder<single_thread>: ring append + live-table update + ticks()
//   hooks, no timestamps     the same with recorder_options::timestamps = false (sequence numbers)
//   clock reads              ticks() (the recorder's source) and steady_clock::now()
//   hooks, outside a step    recording off: live-table update only (blocks live at step start)
//   hooks, shared policy     recorder<shared>: per-thread buffer + sharded live table, one thread
//   hooks, shared, 2 threads two threads on one recorder<shared>, each on its own blocks
//   adaptor over a bump resource: no adaptor / recording_resource<recorder<off>> /
//                            recording_resource<recorder<single_thread>>; ns per event is the
//                            time above the bare upstream divided by 2 events
// trace::off is "compiled to nothing" when the off adaptor's loop has the same machine-code
// size as the bare loop: both loops are placed in their own ELF sections and measured with
// the linker's __start_/__stop_ symbols (meaningful in optimised builds; the build type is
// printed).
#include <algorithm>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "headroom/host/stream.hpp"
#include "headroom/trace.hpp"

namespace tr = headroom::trace;
using headroom::host::inline_stream;

namespace trace_bench {

constexpr std::size_t live_addresses = 4096;

// Hands out the same preallocated blocks in turn: an upstream that costs almost nothing, so
// the adaptor's own cost shows.
struct bump_resource {
  std::byte* base = nullptr;
  std::size_t next = 0;
  void* allocate(inline_stream const&, std::size_t, std::size_t = 16) noexcept {
    void* p = base + 64 * next;
    next = next + 1 == live_addresses ? 0 : next + 1;
    return p;
  }
  void deallocate(inline_stream const&, void*, std::size_t, std::size_t = 16) noexcept {}
  friend bool operator==(bump_resource const&, bump_resource const&) = default;
};
static_assert(headroom::stream_resource<bump_resource, inline_stream>);

}  // namespace trace_bench

using trace_bench::bump_resource;
using trace_bench::live_addresses;

namespace {

using off_resource = tr::recording_resource<bump_resource, tr::recorder<tr::off>>;
using on_resource = tr::recording_resource<bump_resource, tr::recorder<>>;

// Time is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not the wall clock: on a VM
// whose few cores other jobs share, a thread that is descheduled does not count that time.
struct cpu_time_point {
  double seconds;
};
cpu_time_point cpu_now() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return {static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec)};
}
double seconds_since(cpu_time_point t0) { return cpu_now().seconds - t0.seconds; }

template <class R>
double hooks_ns(R& rec, std::byte* base, std::size_t iterations) {
  auto const t0 = cpu_now();
  // Each block is freed half a lap after its allocation: the table holds live_addresses / 2
  // blocks, and the free's lookup cannot reuse the alloc's (both hooks are inlined here).
  for (std::size_t i = 0; i < iterations; ++i) {
    rec.alloc(base + 64 * (i % live_addresses), 64, 0, tr::categories::activation);
    rec.free_completed(base + 64 * ((i + live_addresses / 2) % live_addresses), 64, 0);
  }
  return seconds_since(t0) * 1e9 / static_cast<double>(2 * iterations);
}

}  // namespace

// The measured loops, each alone in its ELF section. The resource comes in through a
// volatile-free reference so the loop cannot be folded away; the sink keeps the pointers.
extern "C" {
__attribute__((noinline, used, section("hr_trace_bare"))) std::uintptr_t hr_loop_bare(bump_resource& r,
                                                                                       std::size_t n) {
  inline_stream const s;
  std::uintptr_t sink = 0;
  for (std::size_t i = 0; i < n; ++i) {
    void* p = r.allocate(s, 64, 16);
    sink += reinterpret_cast<std::uintptr_t>(p);
    r.deallocate(s, p, 64, 16);
  }
  return sink;
}
__attribute__((noinline, used, section("hr_trace_off"))) std::uintptr_t hr_loop_off(off_resource& r, std::size_t n) {
  inline_stream const s;
  std::uintptr_t sink = 0;
  for (std::size_t i = 0; i < n; ++i) {
    void* p = r.allocate(s, 64, 16);
    sink += reinterpret_cast<std::uintptr_t>(p);
    r.deallocate(s, p, 64, 16);
  }
  return sink;
}
extern char __start_hr_trace_bare[], __stop_hr_trace_bare[], __start_hr_trace_off[], __stop_hr_trace_off[];
}

int main(int argc, char** argv) {
  std::size_t iterations = 2'000'000;
  int repeats = 5;
  double pytorch_ns = 0;  // 0: not measured in this run
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--events") == 0) iterations = std::max<std::size_t>(1, std::strtoull(argv[i + 1], nullptr, 10) / 2);
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--pytorch-ns") == 0) pytorch_ns = std::strtod(argv[i + 1], nullptr);
  }
  std::vector<std::byte> arena(64 * live_addresses);
  std::byte* base = arena.data();
#ifdef NDEBUG
  char const* build = "optimised (NDEBUG)";
#else
  char const* build = "debug (no NDEBUG): code sizes and times are not representative";
#endif

  auto median = [&](auto&& run) {
    std::vector<double> v;
    for (int r = 0; r < repeats; ++r) v.push_back(run());
    std::ranges::sort(v);
    return v[v.size() / 2];
  };
  tr::recorder<> rec({.max_entries = 100'000});
  rec.start();
  hooks_ns(rec, base, iterations / 10);  // warm-up: page in the ring and the table
  double const recording = median([&] { return hooks_ns(rec, base, iterations); });
  rec.stop();
  double const outside = median([&] { return hooks_ns(rec, base, iterations); });
  tr::recorder<> untimed({.max_entries = 100'000, .timestamps = false});
  untimed.start();
  double const no_clock = median([&] { return hooks_ns(untimed, base, iterations); });
  std::int64_t clock_sink = 0;
  double const ticks_ns = median([&] {
    auto const c0 = cpu_now();
    for (std::size_t i = 0; i < iterations; ++i) clock_sink += tr::ticks();
    return seconds_since(c0) * 1e9 / static_cast<double>(iterations);
  });
  double const clock_ns = median([&] {
    auto const c0 = cpu_now();
    for (std::size_t i = 0; i < iterations; ++i) clock_sink += tr::now_ns();
    return seconds_since(c0) * 1e9 / static_cast<double>(iterations);
  });
  if (clock_sink == 1) std::puts("");

  tr::recorder<tr::shared> shared_rec({.max_entries = 100'000});
  shared_rec.start();
  hooks_ns(shared_rec, base, iterations / 10);
  double const shared = median([&] { return hooks_ns(shared_rec, base, iterations); });
  std::vector<std::byte> arena2(64 * live_addresses);
  double const contended = median([&] {
    double other = 0;
    std::thread t([&] { other = hooks_ns(shared_rec, arena2.data(), iterations / 2); });
    double const mine = hooks_ns(shared_rec, base, iterations / 2);
    t.join();
    return (mine + other) / 2;
  });

  bump_resource bare{base};
  tr::recorder<tr::off> nothing;
  off_resource off(bump_resource{base}, nothing);
  tr::recorder<> rec2({.max_entries = 100'000});
  rec2.start();
  on_resource on(bump_resource{base}, rec2, tr::categories::activation);
  inline_stream const s;
  auto time_loop = [&](auto&& loop) {
    auto const t0 = cpu_now();
    std::uintptr_t const sink = loop();
    double const ns = seconds_since(t0) * 1e9 / static_cast<double>(iterations);
    if (sink == 1) std::puts("");  // keeps the loop's result alive
    return ns;
  };
  double const bare_ns = time_loop([&] { return hr_loop_bare(bare, iterations); });
  double const off_ns = time_loop([&] { return hr_loop_off(off, iterations); });
  double const on_ns = time_loop([&] {
    std::uintptr_t sink = 0;
    for (std::size_t i = 0; i < iterations; ++i) {
      void* p = on.allocate(s, 64, 16);
      sink += reinterpret_cast<std::uintptr_t>(p);
      on.deallocate(s, p, 64, 16);
    }
    return sink;
  });
  auto const bare_bytes = static_cast<long>(__stop_hr_trace_bare - __start_hr_trace_bare);
  auto const off_bytes = static_cast<long>(__stop_hr_trace_off - __start_hr_trace_off);

  std::printf("trace recorder cost, host, one thread unless noted (%s); medians of %d runs of %zu events, thread CPU "
              "time\n", build, repeats, 2 * iterations);
  std::printf("tick source: %s (%.4f ns per tick)\n", tr::tick_source(), tr::time_base::now().ns_per_tick());
  std::printf("%-44s %12s\n", "path", "ns / event");
  std::printf("%-44s %12.1f\n", "hooks, recording (single_thread)", recording);
  std::printf("%-44s %12.1f\n", "hooks, recording, no timestamps", no_clock);
  std::printf("%-44s %12.1f\n", "  (one ticks() read)", ticks_ns);
  std::printf("%-44s %12.1f\n", "  (one steady_clock read)", clock_ns);
  std::printf("%-44s %12.1f\n", "hooks, outside a profiled step", outside);
  std::printf("%-44s %12.1f\n", "hooks, recording (shared, 1 thread)", shared);
  std::printf("%-44s %12.1f\n", "hooks, recording (shared, 2 threads)", contended);
  std::printf("%-44s %12.2f\n", "  2 threads / 1 thread (shared)", contended / shared);
  std::printf("%-44s %12.1f\n", "adaptor over bump resource, bare (per pair)", bare_ns);
  std::printf("%-44s %12.1f\n", "adaptor, trace::off (per pair)", off_ns);
  std::printf("%-44s %12.1f\n", "adaptor, recording (per pair)", on_ns);
  std::printf("%-44s %12.1f\n", "adaptor, recording, above bare (per event)", (on_ns - bare_ns) / 2);
  std::printf("machine code of the alloc/free loop: bare %ld bytes, trace::off %ld bytes (%s)\n", bare_bytes,
              off_bytes, bare_bytes == off_bytes ? "identical size" : "differ");
  std::printf("targets: <= 15 ns / event recording (%s), 2 threads <= 1.5x 1 thread (%s)\n",
              recording <= 15 ? "met" : "NOT met", contended <= 1.5 * shared ? "met" : "NOT met");
  if (pytorch_ns > 0) {
    std::printf("PyTorch's recorder on this host: %.0f ns / event, %.0fx headroom's single_thread recording\n",
                pytorch_ns, pytorch_ns / recording);
  } else {
    std::printf("PyTorch's recorder: not measured in this run (bench/trace_record_torch.py measures it and passes "
                "--pytorch-ns)\n");
  }
  std::printf(
      "{\"bench\":\"trace_record\",\"build\":\"%s\",\"tick_source\":\"%s\",\"events\":%zu,\"repeats\":%d,"
      "\"hooks_ns\":%.2f,\"no_timestamps_ns\":%.2f,\"ticks_ns\":%.2f,\"clock_ns\":%.2f,\"outside_step_ns\":%.2f,"
      "\"shared_ns\":%.2f,\"shared_2threads_ns\":%.2f,\"adaptor_bare_pair_ns\":%.2f,\"adaptor_off_pair_ns\":%.2f,"
      "\"adaptor_on_pair_ns\":%.2f,\"adaptor_event_ns\":%.2f,\"code_bytes_bare\":%ld,\"code_bytes_off\":%ld,"
      "\"target_ns\":15,\"pytorch_ns\":%.1f}\n",
      build, tr::tick_source(), 2 * iterations, repeats, recording, no_clock, ticks_ns, clock_ns, outside, shared,
      contended, bare_ns, off_ns, on_ns, (on_ns - bare_ns) / 2, bare_bytes, off_bytes, pytorch_ns);
  return 0;
}
