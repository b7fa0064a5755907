// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
// Scale validation: cp, stats and pool on every visible GPU of one host, one thread per
// GPU (nccl::launch_per_device over an N-rank world communicator, N = cudaGetDeviceCount >= 2).
// Written for 4 and 8 H200s; runs unchanged on any N >= 2 (groups that do not fit are skipped
// and listed). NCCL_NVLS_ENABLE=0 is set at start unless the environment sets it; nothing here
// calls cuMulticastCreate.
//
// Sections (each prints PASS / FAIL lines, aggregated over ranks and trials, then a table):
//   [cp]    for cp in {2, 4, 8} (cp <= N) and cp=2 x dp=2 (N >= 4), cp=4 x dp=2 (N >= 8), groups
//           carved from the world with split (cp groups: consecutive ranks; dp groups: strided;
//           every block of cp*dp ranks that fits is used): random packed batches (random lengths,
//           padded with cp::padding for the layout) split with cp::cuda::split and
//           cp::cuda::pad_split, gathered with cp::cuda::gather over NCCL (full and chunked
//           workspace), compared bit for bit with the host ops (cp::split / cp::pad_split, the
//           padded full tensor); outputs poisoned before every run. cp::cuda::normalize_loss over
//           the CP x DP group (both placements) against host sums; a DP all_reduce of token
//           counts over the strided DP group. Then bandwidth at cp = N (the world): split, gather's
//           reorder (to_sequence_order) and the whole NCCL gather for 16K and 128K tokens x 4096
//           bf16, beside a D2D cudaMemcpyAsync of the same bytes and a bare NCCL all_gather;
//           medians of --bw-iterations (>= 20) after warm-up, CUDA events. The bandwidth tensors
//           are checked too (gather(split(x)) == x on device).
//   [stats] stats::reducer max and gather over pipeline groups of 2, 4 (N >= 4) and 8 (N >= 8)
//           ranks carved with split, on reports of 8 / 64 / 512 keys whose per-rank values
//           (int64 beyond 2^53, +-inf, -0.0 / +0.0, ties) every rank can rebuild: max, argmax,
//           min, argmin, per-rank values and mean checked exactly, input unchanged, staging
//           workspace poisoned. Latency: median us over --lat-iterations (>= 200) after warm-up
//           of max (and gather) per key count and group size, beside a bare ncclAllReduce of
//           the same bytes (device only, and staged host -> device -> host like the reducer).
//   [pool]  max-pool plan of a real hybrid workload (pool::models, Nemotron-3-Nano-30B-A3B at
//           EP 8: Mamba, attention and MoE units of different shapes), arena from
//           nccl_mem_resource, registered once with the N-rank world communicator (first
//           registration timed alone, then the median of --reg-rounds register/deregister
//           rounds; a cudaMalloc arena of the same size beside it). Forward / backward / forward
//           passes over all units with one unit prefetched: acquire, poison, all-gather every
//           rank's random shard into the leased slots, verify the concatenation on device,
//           release; strict assignment: the same unit gets the same addresses every step and
//           no bucket moves.
// Hang safety: each section allocates its buffers and splits its communicators once, in a setup
// phase, and frees them in a teardown phase; host barriers (quiesce) keep every synchronising
// CUDA / NCCL call away from the peers' NCCL kernels (see "hang safety" below). A watchdog
// reports a section still running after --section-timeout seconds (which section, which ranks
// are inside it and where), aborts the NCCL communicators and fails the run.
// Exit status: 0 when every check passed, 1 otherwise (or on an exception, which aborts the
// group), 2 when the watchdog fired. A ctest test (label gpu, skipped below 2 GPUs) with its own
// harness rather than doctest's: the checks run inside one NCCL world, per section, with a watchdog.
//
//   test_nccl_scale_validation [--seed N] [--bw-iterations 20] [--lat-iterations 200]
//                              [--reg-rounds 5] [--steps 3] [--section-timeout 120]
// Output: sections with PASS/FAIL lines and tables, then one JSON line.
// The sections live in tests/nccl/scale_validation/ (harness, device helpers, shared state, one
// file per module; not globbed as programs); this file holds main.
#include "scale_validation/cp.cuh"
#include "scale_validation/pool.cuh"
#include "scale_validation/stats.cuh"

using namespace scale_validation;

namespace {

std::string json_escape(std::string const& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);  // keep NVLink SHARP / multicast off unless the caller says otherwise
  shared_state st;
  std::string device_name, error;
  int section_failures = 0;
  std::jthread watchdog;
  auto const started = std::chrono::steady_clock::now();
  std::string const date = utc_now();
  try {
    st.opt = parse(argc, argv);
    int const n = hc::device_count();
    expects(n >= 2, "test_nccl_scale_validation: needs at least 2 GPUs, found ", n);
    st.world = n;
    cudaDeviceProp prop{};
    HEADROOM_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
    device_name = prop.name;
    char const* nvls = std::getenv("NCCL_NVLS_ENABLE");
    std::printf("scale validation on %d x %s, %s, seed %llu, NCCL_NVLS_ENABLE=%s\n", n, device_name.c_str(), date.c_str(),
                static_cast<unsigned long long>(st.opt.seed), nvls != nullptr ? nvls : "(unset)");
    std::fflush(stdout);

    st.gate.reset(n);
    st.wd.reset(n);

    // Watchdog: a section still running after --section-timeout seconds is reported (which
    // section, which ranks are still inside it and where), its communicators are aborted and the
    // host barrier broken, so the ranks unwind and the run fails instead of hanging. If they
    // have not returned 15 s later (stuck outside NCCL), the process exits with status 2.
    watchdog = std::jthread([&st](std::stop_token stop) {
      auto const limit = std::chrono::seconds(st.opt.section_timeout_s);
      while (!stop.stop_requested()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        std::string const what = st.wd.overdue(limit);
        if (what.empty()) continue;
        st.watchdog_fired.store(true);
        std::fprintf(stderr, "test_nccl_scale_validation: WATCHDOG: %s; aborting the NCCL communicators\n", what.c_str());
        std::printf("WATCHDOG: %s; aborting the NCCL communicators\n", what.c_str());
        std::fflush(stdout);
        std::fflush(stderr);
        st.fail_fast();
        auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
        while (!stop.stop_requested() && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (stop.stop_requested()) return;
        std::fprintf(stderr, "test_nccl_scale_validation: WATCHDOG: ranks still stuck 15 s after the abort: %s; exiting\n",
                     st.wd.overdue(std::chrono::seconds(0)).c_str());
        std::printf("FAIL: watchdog: %s\n", what.c_str());
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(2);
      }
    });

    nccl::launch_per_device(nccl::first_devices(n), [&](nccl::communicator& world) {
      int const r = world.rank();
      tracked watched(st.wd);
      watched.add(world);
      try {
        // Keep the default memory pool's memory mapped at synchronize (device_cu_seqlens uses
        // cudaMallocAsync / cudaFreeAsync from it): no unmapping between collectives.
        cudaMemPool_t mempool = nullptr;
        HEADROOM_CUDA_TRY(cudaDeviceGetDefaultMemPool(&mempool, world.device()));
        std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
        HEADROOM_CUDA_TRY(cudaMemPoolSetAttribute(mempool, cudaMemPoolAttrReleaseThreshold, &keep));
        hc::stream stream;
        hc::stream_view const s = stream.view();
        auto section = [&](char const* name, auto&& body, auto&& table) {
          st.wd.enter(r, name);
          if (r == 0) {
            std::printf("\n==== [%s] ====\n", name);
            std::fflush(stdout);
          }
          body();
          // A host barrier, not an NCCL one: the body's buffers and communicators are all freed
          // (synchronising calls) before any rank starts the next section's collectives.
          quiesce(st, r, headroom::detail::concat("end of [", name, "]"), s);
          st.wd.leave(r);
          if (r == 0) {
            int const f = st.checks.print(name);
            table();
            std::lock_guard lock(st.m);
            section_failures += f;
          }
        };
        section("cp", [&] {
          cp_correctness(st, world, s);
          cp_bandwidth(st, world, s);  // starts with a quiesce
        }, [&] { print_cp_table(st); });
        section("stats", [&] { stats_section(st, world, s); }, [&] { print_stats_table(st); });
        section("pool", [&] { pool_section(st, world, s); }, [&] { print_pool_table(st); });
      } catch (...) {
        st.fail_fast();  // no rank may stay at the host barrier or in a collective waiting for this one
        throw;
      }
    });
  } catch (std::exception const& e) {
    error = e.what();
    std::fprintf(stderr, "test_nccl_scale_validation: %s\n", e.what());
  }
  watchdog.request_stop();
  if (watchdog.joinable()) watchdog.join();
  if (st.watchdog_fired.load())
    error = "watchdog: a section did not finish within --section-timeout" + (error.empty() ? std::string{} : " (" + error + ")");

  int passed = 0, failed = 0;
  st.checks.totals(passed, failed);
  bool const ok = error.empty() && failed == 0 && passed > 0;
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("\n");
  for (auto const& s : st.skipped) std::printf("skipped: %s\n", s.c_str());
  std::printf("%s: %d checks passed, %d failed%s, %.1f s\n", ok ? "PASS" : "FAIL", passed, failed,
              error.empty() ? "" : (", error: " + error).c_str(), seconds);

  std::ostringstream js;
  js.precision(6);
  js << "{\"bench\":\"scale_validation\",\"device\":\"" << json_escape(device_name) << "\",\"gpus\":" << st.world
     << ",\"date\":\"" << date << "\",\"seed\":" << st.opt.seed << ",\"nvls_enable\":\""
     << json_escape(std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "") << "\",\"ok\":"
     << (ok ? "true" : "false") << ",\"checks_passed\":" << passed << ",\"checks_failed\":" << failed << ",\"error\":\""
     << json_escape(error) << "\",\"seconds\":" << seconds << ",\"cp_bandwidth\":[";
  for (std::size_t i = 0; i < st.bw.size(); ++i) {
    auto const& b = st.bw[i];
    double const ours = b.ours_ms.empty() ? 0 : b.ours_ms[0];
    double const worst = b.ours_ms.empty() ? 0 : *std::max_element(b.ours_ms.begin(), b.ours_ms.end());
    double const peer = b.peer_ms.empty() ? 0 : b.peer_ms[0];
    js << (i ? "," : "") << "{\"op\":\"" << b.op << "\",\"tokens\":" << b.tokens << ",\"width\":" << b.width << ",\"cp\":" << b.cp
       << ",\"bytes_out\":" << b.bytes_out << ",\"ms_rank0\":" << ours << ",\"ms_worst\":" << worst << ",\"peer\":\"" << b.peer
       << "\",\"peer_ms_rank0\":" << peer << "}";
  }
  js << "],\"stats_latency_us\":[";
  for (std::size_t i = 0; i < st.lat.size(); ++i) {
    auto const& l = st.lat[i];
    js << (i ? "," : "") << "{\"group\":" << l.group << ",\"keys\":" << l.keys << ",\"max_wall\":" << l.max_wall
       << ",\"max_event\":" << l.max_event << ",\"gather_wall\":" << l.gather_wall << ",\"nccl_staged_wall\":" << l.nccl_staged_wall
       << ",\"nccl_device_wall\":" << l.nccl_device_wall << "}";
  }
  auto const& p = st.pool;
  js << "],\"pool\":{\"workload\":\"" << json_escape(p.workload) << "\",\"arena_bytes\":" << p.arena_bytes
     << ",\"units\":" << p.units << ",\"gathered_bytes_per_step\":" << p.gathered_bytes_per_step
     << ",\"register_first_ms\":" << p.reg_first_ms << ",\"register_median_ms\":" << p.reg_median_ms
     << ",\"deregister_median_ms\":" << p.dereg_median_ms << ",\"malloc_register_first_ms\":" << p.malloc_reg_first_ms
     << ",\"malloc_register_median_ms\":" << p.malloc_reg_median_ms << ",\"moves\":" << p.moves << ",\"step_ms\":[";
  for (std::size_t i = 0; i < p.step_ms.size(); ++i) js << (i ? "," : "") << p.step_ms[i];
  js << "]},\"skipped\":" << st.skipped.size() << "}";
  std::printf("%s\n", js.str().c_str());
  static_cast<void>(section_failures);
  if (st.watchdog_fired.load()) return 2;
  return ok ? 0 : 1;
}
