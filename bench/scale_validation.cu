// Scale validation (issue 8): cp, stats and pool on every visible GPU of one host, one thread per
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
// group), 2 when the watchdog fired.
//
//   bench_scale_validation [--seed N] [--bw-iterations 20] [--lat-iterations 200] [--reg-rounds 5]
//                          [--steps 3] [--section-timeout 120]
// Output: sections with PASS/FAIL lines and tables, then one JSON line.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/cp/cuda/gather.cuh"
#include "headroom/cp/cuda/ops.cuh"
#include "headroom/cp/loss.hpp"
#include "headroom/cp/ops.hpp"
#include "headroom/cp/padding.hpp"
#include "headroom/cp/partition.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/event.hpp"
#include "headroom/cuda/pinned_resource.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"
#include "headroom/nccl/check.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/nccl/mem_resource.hpp"
#include "headroom/pool/cuda/nccl.hpp"
#include "headroom/pool/cuda/unit_pool.hpp"
#include "headroom/pool/models.hpp"
#include "headroom/pool/plan.hpp"
#include "headroom/stats/cuda/staging.hpp"
#include "headroom/stats.hpp"

using namespace headroom;
namespace hc = headroom::cuda;
namespace hs = headroom::stats;
using bf16 = __nv_bfloat16;
using i64 = std::int64_t;
using u64 = std::uint64_t;

namespace {

// ---- options ---------------------------------------------------------------------------------

struct options {
  u64 seed = 20261121;
  int bw_iterations = 20;
  int bw_warmup = 3;
  int lat_iterations = 200;
  int lat_warmup = 20;
  int reg_rounds = 5;
  int steps = 3;
  int section_timeout_s = 120;  // watchdog: a section running longer is reported and aborted
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view const a = argv[i];
    expects(i + 1 < argc, "bench_scale_validation: ", a, " needs a value");
    char const* v = argv[++i];
    char* end = nullptr;
    unsigned long long const n = std::strtoull(v, &end, 10);
    expects(end != v && *end == '\0', "bench_scale_validation: ", a, " expects a non-negative integer, got '", v, "'");
    auto small = [&](int lo) {
      expects(n >= static_cast<unsigned long long>(lo) && n < (1ull << 24), "bench_scale_validation: ", a, " = ", n,
              ", expected an integer in [", lo, ", 2^24)");
      return static_cast<int>(n);
    };
    if (a == "--seed") o.seed = n;
    else if (a == "--bw-iterations") o.bw_iterations = small(20);
    else if (a == "--lat-iterations") o.lat_iterations = small(200);
    else if (a == "--reg-rounds") o.reg_rounds = small(1);
    else if (a == "--steps") o.steps = small(2);
    else if (a == "--section-timeout") o.section_timeout_s = small(1);
    else
      throw invalid_argument(headroom::detail::concat("bench_scale_validation: unknown option ", a,
                                                      " (expected --seed, --bw-iterations, --lat-iterations, "
                                                      "--reg-rounds, --steps, --section-timeout)"));
  }
  return o;
}

// ---- checks, aggregated over ranks -----------------------------------------------------------

/// Every rank records its checks here under a name; rank 0 prints each section's lines after a
/// world barrier. Same names on every rank give one line per check with the rank count.
class ledger {
 public:
  void record(std::string const& section, std::string const& name, bool ok, int rank, std::string const& detail = {}) {
    std::lock_guard lock(m_);
    auto& e = find(section, name);
    if (ok) {
      ++e.passed;
    } else {
      ++e.failed;
      if (e.first_failure.empty()) e.first_failure = headroom::detail::concat("world rank ", rank, ": ", detail);
    }
  }
  /// Prints the section's lines; returns its number of failed checks.
  int print(std::string const& section) {
    std::lock_guard lock(m_);
    int failed = 0;
    for (auto const& e : entries_) {
      if (e.section != section) continue;
      failed += e.failed;
      if (e.failed == 0)
        std::printf("PASS  [%s] %s (%d rank-checks)\n", section.c_str(), e.name.c_str(), e.passed);
      else
        std::printf("FAIL  [%s] %s (%d of %d rank-checks failed; first: %s)\n", section.c_str(), e.name.c_str(), e.failed,
                    e.failed + e.passed, e.first_failure.c_str());
    }
    std::fflush(stdout);
    return failed;
  }
  void totals(int& passed, int& failed) {
    std::lock_guard lock(m_);
    passed = failed = 0;
    for (auto const& e : entries_) {
      passed += e.passed;
      failed += e.failed;
    }
  }

 private:
  struct entry {
    std::string section, name;
    int passed = 0, failed = 0;
    std::string first_failure;
  };
  entry& find(std::string const& section, std::string const& name) {
    for (auto& e : entries_)
      if (e.section == section && e.name == name) return e;
    entries_.push_back({section, name, 0, 0, {}});
    return entries_.back();
  }
  std::mutex m_;
  std::vector<entry> entries_;
};

// ---- hang safety -------------------------------------------------------------------------------
//
// All ranks are threads of this one process. cudaFree, cudaFreeHost, cudaMallocHost, cudaMalloc
// (with NCCL's peer mappings), ncclMemAlloc / ncclMemFree, ncclCommSplit / ncclCommDestroy,
// ncclCommRegister / ncclCommDeregister and cudaDeviceSynchronize can wait for work on the
// peers' devices too. If rank A is inside such a call while rank B's NCCL kernel waits for A's
// next collective, neither returns: a deadlock (the [stats] hang of the first 2 x H200 run,
// where every (group, keys) iteration made and freed its workspaces between collectives).
//
// The rule here: every section has a setup phase (split its communicators, allocate every buffer
// once, sized for its largest case), a collective phase (kernels and collectives only; device
// buffers come from a per-rank scratch_arena, see dbuf), and a teardown phase. The phases are
// separated by quiesce(): each rank synchronises its streams, then waits at a host barrier of
// all ranks, so at that point no NCCL kernel is in flight anywhere, and none starts before every
// rank has left the synchronising calls. A watchdog (--section-timeout) reports and aborts a
// section that still hangs.

/// A host barrier of the N rank threads that can be broken (by a failing rank or the watchdog):
/// waiters then throw group_aborted instead of waiting for a rank that will never come.
class host_gate {
 public:
  void reset(int parties) {
    std::lock_guard lock(m_);
    parties_ = parties;
  }
  void arrive_and_wait() {
    std::unique_lock lock(m_);
    if (broken_) throw group_aborted("scale_validation: host barrier broken (a rank failed or the watchdog fired)");
    std::uint64_t const gen = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return broken_ || generation_ != gen; });
    if (generation_ == gen) throw group_aborted("scale_validation: host barrier broken (a rank failed or the watchdog fired)");
  }
  void break_all() {
    std::lock_guard lock(m_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int parties_ = 0, arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool broken_ = false;
};

/// What the watchdog sees: each rank's section and last phase, and every live communicator
/// (so it can abort them all).
class watch {
 public:
  using clock = std::chrono::steady_clock;
  void reset(int ranks) {
    std::lock_guard lock(m_);
    section_.assign(static_cast<std::size_t>(ranks), {});
    phase_.assign(static_cast<std::size_t>(ranks), {});
  }
  void enter(int rank, std::string const& section) {
    std::lock_guard lock(m_);
    if (current_ != section) current_ = section, started_ = clock::now();
    section_.at(static_cast<std::size_t>(rank)) = section;
    phase_.at(static_cast<std::size_t>(rank)) = "entering";
  }
  void leave(int rank) {
    std::lock_guard lock(m_);
    section_.at(static_cast<std::size_t>(rank)).clear();
  }
  void phase(int rank, std::string what) {
    std::lock_guard lock(m_);
    phase_.at(static_cast<std::size_t>(rank)) = std::move(what);
  }
  void track(nccl::communicator* c) {
    std::lock_guard lock(m_);
    if (c != nullptr && c->valid()) comms_.push_back(c);
  }
  void untrack(nccl::communicator* c) {
    std::lock_guard lock(m_);
    std::erase(comms_, c);
  }
  /// ncclCommAbort on every tracked communicator (their in-flight kernels stop; later calls
  /// throw group_aborted). Under the lock, so no owner destroys one meanwhile.
  void abort_all() {
    std::lock_guard lock(m_);
    for (auto* c : comms_) c->abort();
  }
  /// When a section has run longer than `limit`: "section [x] ... ranks still inside: ...".
  [[nodiscard]] std::string overdue(clock::duration limit) {
    std::lock_guard lock(m_);
    if (current_.empty() || clock::now() - started_ < limit) return {};
    std::string inside;
    for (std::size_t r = 0; r < section_.size(); ++r)
      if (section_[r] == current_)
        inside += headroom::detail::concat(inside.empty() ? "" : "; ", "rank ", r, " (", phase_[r], ")");
    if (inside.empty()) return {};
    return headroom::detail::concat("section [", current_, "] did not finish within ",
                                    std::chrono::duration_cast<std::chrono::seconds>(limit).count(),
                                    " s; ranks still inside: ", inside);
  }

 private:
  std::mutex m_;
  std::vector<std::string> section_, phase_;
  std::string current_;
  clock::time_point started_{};
  std::vector<nccl::communicator*> comms_;
};

/// Keeps communicators on the watchdog's list for its lifetime. Declare it after the
/// communicators it names, so it is destroyed (and they leave the list) before they are.
class tracked {
 public:
  explicit tracked(watch& w) : w_(w) {}
  tracked(tracked const&) = delete;
  tracked& operator=(tracked const&) = delete;
  ~tracked() {
    for (auto* c : comms_) w_.untrack(c);
  }
  void add(nccl::communicator& c) {
    if (!c.valid()) return;
    comms_.push_back(&c);
    w_.track(&c);
  }

 private:
  watch& w_;
  std::vector<nccl::communicator*> comms_;
};

// ---- device helpers --------------------------------------------------------------------------

/// One cudaMalloc per rank, made in a setup phase and freed in a teardown phase; dbufs made
/// while it is installed (use_arena) are carved from it, so the collective phases call neither
/// cudaMalloc nor cudaFree. Stack discipline: arena_scope rewinds to where it started.
class scratch_arena {
 public:
  static constexpr std::size_t align = 256;
  scratch_arena(std::size_t bytes, char const* what) : bytes_(bytes), what_(what) {
    HEADROOM_CUDA_TRY(cudaMalloc(&base_, std::max<std::size_t>(bytes, align)));
  }
  scratch_arena(scratch_arena const&) = delete;
  scratch_arena& operator=(scratch_arena const&) = delete;
  ~scratch_arena() { HEADROOM_CUDA_TRY_NOTHROW(cudaFree(base_)); }
  [[nodiscard]] void* take(std::size_t bytes) {
    std::size_t const need = (std::max<std::size_t>(bytes, 1) + align - 1) / align * align;
    expects<logic_error>(used_ + need <= bytes_, "scale_validation: scratch arena '", what_, "' of ", bytes_,
                         " bytes exhausted (", used_, " used, ", need, " more asked); size it for the largest case");
    void* p = static_cast<std::byte*>(base_) + used_;
    used_ += need;
    return p;
  }
  [[nodiscard]] std::size_t mark() const noexcept { return used_; }
  void rewind(std::size_t m) noexcept { used_ = m; }
  /// Bytes of `count` buffers of the given sizes carved one after another.
  [[nodiscard]] static std::size_t footprint(std::initializer_list<std::size_t> sizes) {
    std::size_t t = 0;
    for (auto b : sizes) t += (std::max<std::size_t>(b, 1) + align - 1) / align * align;
    return t;
  }

 private:
  void* base_ = nullptr;
  std::size_t bytes_, used_ = 0;
  char const* what_;
};

thread_local scratch_arena* t_arena = nullptr;       // installed by use_arena
thread_local bool t_collective_phase = false;         // set by collective_phase

/// Installs `a` for this thread's dbufs until the end of the scope.
class use_arena {
 public:
  explicit use_arena(scratch_arena& a) : prev_(std::exchange(t_arena, &a)) {}
  use_arena(use_arena const&) = delete;
  use_arena& operator=(use_arena const&) = delete;
  ~use_arena() { t_arena = prev_; }

 private:
  scratch_arena* prev_;
};
/// Gives back, at the end of the scope, what this thread's arena handed out inside it. The
/// memory is reused in stream order by the next scope's work on the same stream.
class arena_scope {
 public:
  arena_scope() : a_(t_arena), mark_(a_ != nullptr ? a_->mark() : 0) {}
  arena_scope(arena_scope const&) = delete;
  arena_scope& operator=(arena_scope const&) = delete;
  ~arena_scope() {
    if (a_ != nullptr) a_->rewind(mark_);
  }

 private:
  scratch_arena* a_;
  std::size_t mark_;
};

/// A device buffer: from the installed scratch_arena when there is one (nothing to free), else
/// its own cudaMalloc, which a collective phase refuses (it would be a synchronising call
/// between collectives).
template <class T>
class dbuf {
 public:
  explicit dbuf(std::size_t n) : n_(n) {
    if (t_arena != nullptr) {
      p_ = t_arena->take(n * sizeof(T));
      owned_ = false;
      return;
    }
    expects<logic_error>(!t_collective_phase, "scale_validation: dbuf of ", n * sizeof(T),
                         " bytes by cudaMalloc inside a collective phase (install a scratch_arena in the setup phase)");
    HEADROOM_CUDA_TRY(cudaMalloc(&p_, n == 0 ? 16 : n * sizeof(T)));
  }
  dbuf(dbuf&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), owned_(std::exchange(o.owned_, false)) {}
  dbuf(dbuf const&) = delete;
  dbuf& operator=(dbuf const&) = delete;
  dbuf& operator=(dbuf&&) = delete;
  ~dbuf() {
    if (p_ != nullptr && owned_) HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p_));
  }
  [[nodiscard]] T* data() const noexcept { return static_cast<T*>(p_); }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return n_ * sizeof(T); }
  void poison(hc::stream_view s, int byte = 0xAB) const {
    if (n_ > 0) HEADROOM_CUDA_TRY(cudaMemsetAsync(p_, byte, bytes(), s.get()));
  }
  void upload(std::vector<T> const& h, hc::stream_view s) const {
    expects(h.size() == n_, "dbuf::upload: ", h.size(), " elements into ", n_);
    if (n_ > 0) HEADROOM_CUDA_TRY(cudaMemcpyAsync(p_, h.data(), bytes(), cudaMemcpyHostToDevice, s.get()));
    s.synchronize();  // h may die after the call
  }
  [[nodiscard]] std::vector<T> download(hc::stream_view s) const {
    std::vector<T> h(n_);
    s.synchronize();
    if (n_ > 0) HEADROOM_CUDA_TRY(cudaMemcpy(h.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  void* p_ = nullptr;
  std::size_t n_;
  bool owned_ = true;
};

template <class T>
[[nodiscard]] bool same_bytes(std::vector<T> const& a, std::vector<T> const& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

__host__ __device__ inline u64 mix64(u64 x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/// Pseudo-random pattern of a [rows, width] uint16 tensor: element (r, c) = f(seed, r, c).
__global__ void pattern_kernel(std::uint16_t* out, i64 rows, i64 width, u64 seed) {
  i64 const n = rows * width;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    out[i] = static_cast<std::uint16_t>(mix64(seed ^ static_cast<u64>(i) * 0x9E3779B97F4A7C15ull));
}
__global__ void check_pattern_kernel(std::uint16_t const* in, i64 rows, i64 width, u64 seed, unsigned long long* bad) {
  i64 const n = rows * width;
  unsigned long long mine = 0;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    mine += in[i] != static_cast<std::uint16_t>(mix64(seed ^ static_cast<u64>(i) * 0x9E3779B97F4A7C15ull));
  if (mine != 0) atomicAdd(bad, mine);
}

/// Keeps the GPU busy while the host enqueues the timed work (host launch cost is not timed).
__global__ void spin_kernel(long long cycles) {
  long long const start = clock64();
  while (clock64() - start < cycles) {
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median ms of `op` on `s` between two events; `before` runs untimed ahead of each event pair
/// (a spin kernel for local ops, a barrier for collectives).
double median_ms(hc::stream_view s, int warmup, int iterations, std::function<void()> const& before,
                 std::function<void()> const& op) {
  hc::event a(hc::event_options{.timing = true}), b(hc::event_options{.timing = true});
  for (int i = 0; i < warmup; ++i) {
    before();
    op();
  }
  s.synchronize();
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    before();
    a.record(s);
    op();
    b.record(s);
    b.synchronize();
    ms.push_back(elapsed_ms(a, b));
  }
  return median(ms);
}

std::string utc_now() {
  std::time_t const t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

// ---- shared results (written by every rank under the mutex, printed by rank 0) ---------------

struct cp_bw_row {
  std::string op;
  i64 tokens = 0, width = 0;
  int cp = 0;
  std::size_t bytes_out = 0;
  std::vector<double> ours_ms, peer_ms;  // per rank
  std::string peer;                      // memcpy or nccl all_gather
};

struct stats_row {
  int group = 0;
  std::size_t keys = 0;
  double max_wall = 0, max_event = 0, gather_wall = 0, nccl_device_wall = 0, nccl_staged_wall = 0;
};

struct pool_result {
  std::string workload;
  u64 arena_bytes = 0;
  std::size_t units = 0, slots = 0, shapes = 0;
  u64 gathered_bytes_per_step = 0;
  std::vector<double> step_ms;
  double reg_first_ms = 0, reg_median_ms = 0, dereg_median_ms = 0;
  double malloc_reg_first_ms = 0, malloc_reg_median_ms = 0;
  u64 moves = 0, cross_stream_waits = 0;
};

struct shared_state {
  options opt;
  int world = 0;
  ledger checks;
  std::mutex m;
  std::vector<std::string> skipped;
  std::vector<cp_bw_row> bw;  // indexed by case, filled per rank
  std::vector<stats_row> lat;
  pool_result pool;
  host_gate gate;  // the ranks' host barrier (quiesce)
  watch wd;        // what the watchdog reports and aborts
  std::atomic<bool> watchdog_fired{false};
  void skip(int rank, std::string why) {
    if (rank != 0) return;
    std::lock_guard lock(m);
    skipped.push_back(std::move(why));
  }
  /// A rank failed (or the watchdog fired): abort every communicator and break the host barrier
  /// now, before the failing rank's buffers are freed, so no rank is left waiting.
  void fail_fast() {
    wd.abort_all();
    gate.break_all();
  }
};

/// Every rank drains `streams`, then waits at the host barrier of all ranks: from here until
/// the next collective no NCCL kernel is in flight on any device, so synchronising CUDA / NCCL
/// calls (allocation, free, split, destroy, register) are safe. `what` is the watchdog's phase.
void quiesce(shared_state& st, int rank, std::string const& what, std::initializer_list<hc::stream_view> streams) {
  st.wd.phase(rank, "host barrier: " + what);
  for (auto const& s : streams) s.synchronize();
  st.gate.arrive_and_wait();
}
void quiesce(shared_state& st, int rank, std::string const& what, hc::stream_view s) { quiesce(st, rank, what, {s}); }

/// Runs the collectives of a section: refuses dbuf cudaMallocs, and on a failure aborts the
/// group before the stack unwinds into the frees of the setup phase's buffers.
template <class Fn>
void collective_phase(shared_state& st, Fn&& fn) {
  bool const outer = std::exchange(t_collective_phase, true);
  try {
    fn();
  } catch (...) {
    t_collective_phase = outer;
    st.fail_fast();
    throw;
  }
  t_collective_phase = outer;
}

/// A device-side barrier over `comm` (one-element all_reduce) on scratch allocated in a setup
/// phase. communicator::barrier would cudaMalloc its scratch on first use, between collectives.
class device_barrier {
 public:
  explicit device_barrier(hc::stream_view s) : flag_(1) {
    HEADROOM_CUDA_TRY(cudaMemsetAsync(flag_.data(), 0, sizeof(std::uint32_t), s.get()));
  }
  void operator()(nccl::communicator& comm, hc::stream_view s) const {
    comm.all_reduce(std::span<std::uint32_t const>(flag_.data(), 1), std::span<std::uint32_t>(flag_.data(), 1), reduce_op::sum, s);
  }

 private:
  dbuf<std::uint32_t> flag_;
};

// =============================================================================================
// [cp]
// =============================================================================================

template <class T>
std::vector<T> random_rows(std::mt19937_64& gen, i64 rows, i64 width) {
  std::vector<T> v(static_cast<std::size_t>(rows * width));
  auto* b = reinterpret_cast<unsigned char*>(v.data());
  std::size_t const nb = v.size() * sizeof(T);
  for (std::size_t i = 0; i < nb; i += 8) {
    u64 const x = gen();
    std::memcpy(b + i, &x, std::min<std::size_t>(8, nb - i));
  }
  return v;
}

/// Raw lengths 0..max_len (empty sequences included), padded for `L` at `cp`; sometimes a
/// total multiple that forces a dummy sequence.
template <class L>
cp::padding random_padding(std::mt19937_64& gen, int cp_size, int max_sequences, int max_len) {
  std::vector<i64> raw{0};
  int const n = 1 + static_cast<int>(gen() % static_cast<unsigned>(max_sequences));
  for (int i = 0; i < n; ++i) raw.push_back(raw.back() + static_cast<i64>(gen() % static_cast<unsigned>(max_len + 1)));
  if (raw.back() == 0) raw.back() = 1;
  auto const align = cp::alignment_for<L>(cp_size);
  return cp::padding(raw, align, gen() % 3 == 0 ? 2 * align : 1);
}

struct group_layout {
  int cp = 1, dp = 1;
  std::string label() const { return headroom::detail::concat("cp=", cp, " dp=", dp); }
};

u64 batch_seed(u64 seed, group_layout g, int block, int dp_index, int trial) {
  return mix64(seed ^ mix64(static_cast<u64>(g.cp) * 1000003ull + static_cast<u64>(g.dp) * 10007ull +
                            static_cast<u64>(block) * 101ull + static_cast<u64>(dp_index) * 7ull +
                            static_cast<u64>(trial) * 0x100000001ull));
}

/// One random batch through split / pad_split / gather on one CP group, against the host.
template <class L, class T>
void cp_case(shared_state& st, nccl::communicator& cpc, int world_rank, std::string const& tag, std::string const& what,
             u64 seed, i64 width, hc::stream_view s) {
  arena_scope scope;  // the dbufs below come from the section's scratch arena (declared first: rewound last)
  int const cp_size = cpc.size();
  std::mt19937_64 gen(seed);  // the same on every rank of the CP group
  auto const pd = random_padding<L>(gen, cp_size, 16, 1500);
  auto const raw = random_rows<T>(gen, pd.raw_rows(), width);
  cp::partition<L> p(pd.padded_cu_seqlens(), cp_size, cpc.rank());
  std::vector<T> padded(static_cast<std::size_t>(pd.padded_rows() * width));
  cp::pad(pd, cp::matrix_view<T const>(raw.data(), pd.raw_rows(), width), cp::matrix_view<T>(padded.data(), pd.padded_rows(), width));
  std::vector<T> local(static_cast<std::size_t>(p.local_rows() * width)), local_ps(local.size());
  cp::split(p, cp::matrix_view<T const>(padded.data(), p.global_rows(), width), cp::matrix_view<T>(local.data(), p.local_rows(), width));
  cp::pad_split(pd, p, cp::matrix_view<T const>(raw.data(), pd.raw_rows(), width),
                cp::matrix_view<T>(local_ps.data(), p.local_rows(), width));
  std::string const detail = headroom::detail::concat(what, ", seed ", seed, ", ", p.describe());
  st.checks.record("cp", tag + ": host cp::pad_split == host cp::split(cp::pad)", same_bytes(local, local_ps), world_rank, detail);

  cp::cuda::device_cu_seqlens cu(pd.padded_cu_seqlens(), s);
  cp::cuda::device_cu_seqlens raw_cu(pd.raw_cu_seqlens().first(static_cast<std::size_t>(pd.raw_sequences()) + 1), s);
  dbuf<T> d_raw(raw.size()), d_padded(padded.size()), d_local(local.size()), d_out(padded.size());
  d_raw.upload(raw, s);
  d_padded.upload(padded, s);
  auto const local_v = cp::matrix_view<T>(d_local.data(), p.local_rows(), width);
  auto const out_v = cp::matrix_view<T>(d_out.data(), p.global_rows(), width);

  d_local.poison(s);
  cp::cuda::split(p, cu.view(), cp::matrix_view<T const>(d_padded.data(), p.global_rows(), width), local_v, s);
  st.checks.record("cp", tag + ": cp::cuda::split == host cp::split (bitwise)", same_bytes(d_local.download(s), local),
                   world_rank, detail);

  d_local.poison(s, 0x5A);
  cp::cuda::pad_split(pd, p, raw_cu.view(), cu.view(), cp::matrix_view<T const>(d_raw.data(), pd.raw_rows(), width), local_v, T{}, s);
  st.checks.record("cp", tag + ": cp::cuda::pad_split (raw, kernel pads) == host cp::split (bitwise)",
                   same_bytes(d_local.download(s), local), world_rank, detail);

  // d_local now holds this rank's shard (from the kernel): gather it back over NCCL.
  i64 const ws_rows = cp::gather_workspace_rows(p);
  dbuf<T> d_ws(static_cast<std::size_t>(ws_rows * width));
  d_out.poison(s);
  d_ws.poison(s);
  cp::cuda::gather(cpc, p, cu.view(), cp::matrix_view<T const>(local_v), out_v, cp::matrix_view<T>(d_ws.data(), ws_rows, width), s);
  st.checks.record("cp", tag + ": cp::cuda::gather (NCCL) == padded full tensor (bitwise)",
                   same_bytes(d_out.download(s), padded), world_rank, detail);

  if constexpr (std::same_as<L, cp::dual_chunk>) {
    i64 const small = cp::gather_workspace_rows(p, p.longest_sequence() + 7);
    dbuf<T> d_small(static_cast<std::size_t>(small * width));
    d_out.poison(s, 0x3C);
    d_small.poison(s);
    cp::cuda::gather(cpc, p, cu.view(), cp::matrix_view<T const>(local_v), out_v, cp::matrix_view<T>(d_small.data(), small, width), s);
    st.checks.record("cp", tag + ": cp::cuda::gather, chunked workspace == padded full tensor (bitwise)",
                     same_bytes(d_out.download(s), padded), world_rank, detail);
  }
}

/// The documented result of normalize_loss (cp/loss.hpp) from the group's sums, written here
/// from the contract (not taken from the cp module's internals).
cp::token_mean expected_token_mean(double group_loss, double group_tokens, int cp_size, bool replicated) {
  double const dup = replicated ? static_cast<double>(cp_size) : 1.0;
  cp::token_mean m;
  m.loss_sum = group_loss / dup;
  m.tokens = group_tokens / dup;
  if (group_tokens > 0) {
    m.mean = group_loss / group_tokens;
    m.grad_scale = 1.0 / group_tokens;
  }
  return m;
}

/// Per raw row: a loss value exact in double sums.
double loss_of(i64 raw_row) { return static_cast<double>(raw_row % 13) * 0.25; }

/// The loss-normalisation and DP checks of one CP x DP block.
void cp_loss_checks(shared_state& st, nccl::communicator& dp_cp, nccl::communicator* dp, group_layout g, int block,
                    int dp_index, int world_rank, std::string const& tag, hc::stream_view s) {
  // Every replica's batch is rebuilt from its seed: expected sums over the block.
  auto batch = [&](int d) {
    std::mt19937_64 gen(batch_seed(st.opt.seed, g, block, d, 0));
    return random_padding<cp::dual_chunk>(gen, g.cp, 16, 1500);
  };
  double total_loss = 0, total_tokens = 0;
  for (int d = 0; d < g.dp; ++d) {
    auto const pd = batch(d);
    total_tokens += static_cast<double>(pd.raw_rows());
    for (i64 r = 0; r < pd.raw_rows(); ++r) total_loss += loss_of(r);
  }
  auto const pd = batch(dp_index);
  int const cp_rank = dp_cp.rank() % g.cp;
  cp::partition<> p(pd.padded_cu_seqlens(), g.cp, cp_rank);
  double local_loss = 0, local_tokens = 0, replica_loss = 0;
  for (i64 t = 0; t < p.local_rows(); ++t) {
    i64 const r = pd.raw_row(p.source_row(t));
    if (r >= 0) local_loss += loss_of(r), local_tokens += 1;
  }
  for (i64 r = 0; r < pd.raw_rows(); ++r) replica_loss += loss_of(r);
  double const replica_tokens = static_cast<double>(pd.raw_rows());

  arena_scope scope;
  dbuf<double> loss_stats(4);
  auto run = [&]<class P>(P, double loss, double tokens) {
    loss_stats.upload({loss, tokens, -1.0, -1.0}, s);
    cp::cuda::normalize_loss<P>(dp_cp, std::span<double>(loss_stats.data(), 4), g.cp, s);
    return loss_stats.download(s);
  };
  auto same = [](std::vector<double> const& got, cp::token_mean const& e) {
    return got.size() == 4 && got[0] == e.loss_sum && got[1] == e.tokens && got[2] == e.mean && got[3] == e.grad_scale;
  };
  auto describe = [](std::vector<double> const& got, cp::token_mean const& e) {
    std::ostringstream os;
    os.precision(17);
    os << "got {" << got[0] << ", " << got[1] << ", " << got[2] << ", " << got[3] << "}, expected " << e;
    return os.str();
  };
  auto const local = run(cp::loss_placement::cp_local{}, local_loss, local_tokens);
  auto const e_local = expected_token_mean(total_loss, total_tokens, g.cp, false);
  st.checks.record("cp", tag + ": cp::cuda::normalize_loss<cp_local> over CP x DP == host sums (exact)", same(local, e_local),
                   world_rank, describe(local, e_local));
  auto const rep = run(cp::loss_placement::cp_replicated{}, replica_loss, replica_tokens);
  auto const e_rep = expected_token_mean(g.cp * total_loss, g.cp * total_tokens, g.cp, true);
  st.checks.record("cp", tag + ": cp::cuda::normalize_loss<cp_replicated> over CP x DP == host sums (exact)", same(rep, e_rep),
                   world_rank, describe(rep, e_rep));

  if (dp != nullptr) {
    dbuf<i64> n(1);
    n.upload({pd.raw_rows()}, s);
    dp->all_reduce(std::span<i64 const>(n.data(), 1), std::span<i64>(n.data(), 1), reduce_op::sum, s);
    i64 const got = n.download(s)[0];
    st.checks.record("cp", tag + ": strided DP group all_reduce(sum) of replica token counts", got == static_cast<i64>(total_tokens),
                     world_rank, headroom::detail::concat("got ", got, ", expected ", static_cast<i64>(total_tokens)));
  }
}

void cp_correctness(shared_state& st, nccl::communicator& world, hc::stream_view s) {
  int const n = world.size();
  int const r = world.rank();
  std::vector<group_layout> layouts;
  for (int c : {2, 4, 8})
    if (c <= n) layouts.push_back({c, 1});
    else st.skip(r, headroom::detail::concat("cp: cp=", c, " (needs ", c, " GPUs, have ", n, ")"));
  if (n >= 4) layouts.push_back({2, 2});
  else st.skip(r, "cp: cp=2 x dp=2 (needs 4 GPUs)");
  if (n >= 8) layouts.push_back({4, 2});
  else st.skip(r, "cp: cp=4 x dp=2 (needs 8 GPUs)");

  // Setup phase: every layout's groups are split now (collective over the world: every rank
  // calls every split, outsiders with no_color), and one scratch arena serves every case.
  quiesce(st, r, "cp: setup", s);
  struct layout_comms {
    group_layout g;
    bool member;
    int block, in_block, cp_rank, dp_index;
    nccl::communicator cpc, dpc, dpcp;
  };
  std::vector<layout_comms> all;
  all.reserve(layouts.size());
  for (auto const g : layouts) {
    int const block_size = g.cp * g.dp;
    int const blocks = n / block_size;
    bool const member = r < blocks * block_size;
    int const block = r / block_size;
    int const in_block = r % block_size;
    int const cp_rank = in_block % g.cp, dp_index = in_block / g.cp;
    st.wd.phase(r, "cp: setup, split for " + g.label());
    auto& l = all.emplace_back(layout_comms{g, member, block, in_block, cp_rank, dp_index, {}, {}, {}});
    l.cpc = world.split(member ? block * g.dp + dp_index : nccl::communicator::no_color, r);
    if (g.dp > 1) {
      l.dpc = world.split(member ? block * g.cp + cp_rank : nccl::communicator::no_color, r);
      l.dpcp = world.split(member ? block : nccl::communicator::no_color, r);
    }
  }
  tracked watched(st.wd);  // after the communicators: leaves the watchdog's list before they die
  for (auto& l : all) watched.add(l.cpc), watched.add(l.dpc), watched.add(l.dpcp);
  // Largest case: 16 sequences x 1500 raw rows, padded (alignment <= 2 cp = 16 rows, plus a dummy
  // sequence) to under 25,000 rows of at most 128 B (bf16 x 64): six such buffers (raw, padded,
  // local, out, workspace, chunked workspace) are under 20 MB. take() throws, naming the sizes,
  // if a case ever needs more.
  scratch_arena arena(std::size_t{64} << 20, "cp correctness");
  quiesce(st, r, "cp: setup done", s);

  collective_phase(st, [&] {
    use_arena use(arena);
    for (auto& l : all) {
      if (!l.member) continue;
      group_layout const g = l.g;
      int const block = l.block, in_block = l.in_block, cp_rank = l.cp_rank, dp_index = l.dp_index;
      int const block_size = g.cp * g.dp;
      auto& cpc = l.cpc;
      auto& dpc = l.dpc;
      auto& dpcp = l.dpcp;
      std::string const tag = g.label();
      st.wd.phase(r, "cp: " + tag);
      bool const shape_ok = cpc.size() == g.cp && cpc.rank() == cp_rank &&
                            (g.dp == 1 || (dpc.size() == g.dp && dpc.rank() == dp_index && dpcp.size() == block_size &&
                                           dpcp.rank() == in_block));
      st.checks.record("cp", tag + ": split groups have the expected sizes and ranks (cp consecutive, dp strided)", shape_ok, r,
                       headroom::detail::concat("cp group ", cpc.rank(), "/", cpc.size()));
      for (int trial = 0; trial < 3; ++trial) {
        u64 const seed = batch_seed(st.opt.seed, g, block, dp_index, trial);
        cp_case<cp::dual_chunk, bf16>(st, cpc, r, tag, "dual_chunk bf16 x 64", seed, 64, s);
        cp_case<cp::dual_chunk, float>(st, cpc, r, tag, "dual_chunk f32 x 3", seed + 1, 3, s);
        cp_case<cp::dual_chunk, std::uint8_t>(st, cpc, r, tag, "dual_chunk u8 x 5", seed + 2, 5, s);
        cp_case<cp::contiguous, bf16>(st, cpc, r, tag + " contiguous", "contiguous bf16 x 64", seed + 3, 64, s);
      }
      cp_loss_checks(st, g.dp > 1 ? dpcp : cpc, g.dp > 1 ? &dpc : nullptr, g, block, dp_index, r, tag, s);
    }
  });
  // Teardown phase: the arena and the split communicators die at return, with every rank past
  // its last collective; the next phase starts with a quiesce too.
  quiesce(st, r, "cp: teardown", s);
}

/// Padded cu_seqlens of `tokens` rows: sequences of 256..8192 rows, multiples of 2*cp.
std::vector<i64> packed_batch(i64 tokens, int cp_size, u64 seed) {
  std::mt19937_64 gen(seed);
  i64 const m = 2 * cp_size;
  std::uniform_int_distribution<i64> len(std::max<i64>(1, 256 / m), 8192 / m);
  std::vector<i64> cu{0};
  while (cu.back() < tokens) cu.push_back(std::min(tokens, cu.back() + len(gen) * m));
  return cu;
}

void cp_bandwidth(shared_state& st, nccl::communicator& world, hc::stream_view s) {
  int const n = world.size();
  int const r = world.rank();
  i64 const width = 4096;
  std::size_t const row = static_cast<std::size_t>(width) * sizeof(bf16);
  int const it = st.opt.bw_iterations, warm = st.opt.bw_warmup;
  auto spin = [&] { spin_kernel<<<1, 1, 0, s.get()>>>(200000); };
  std::size_t case_index = 0;
  auto put = [&](std::string const& op, i64 tokens, std::size_t bytes_out, std::string const& peer, double ours, double theirs) {
    std::lock_guard lock(st.m);
    if (st.bw.size() <= case_index) st.bw.resize(case_index + 1);
    auto& row_ = st.bw[case_index++];
    if (row_.ours_ms.empty()) {
      row_ = {op, tokens, width, n, bytes_out, std::vector<double>(static_cast<std::size_t>(n)),
              std::vector<double>(static_cast<std::size_t>(n)), peer};
    }
    row_.ours_ms[static_cast<std::size_t>(r)] = ours;
    row_.peer_ms[static_cast<std::size_t>(r)] = theirs;
  };

  std::array<i64, 2> const wanted_tokens{16384, 131072};
  auto tokens_of = [&](i64 wanted) { return wanted / (2 * n) * (2 * n); };
  auto partition_of = [&](i64 tokens) { return cp::partition<>(packed_batch(tokens, n, 42 + static_cast<u64>(n)), n, r); };

  // Setup phase: one arena for the largest shape (global, local, out, workspace, counter) and
  // the barrier's scratch, allocated before the first collective.
  quiesce(st, r, "cp bandwidth: setup", s);
  std::size_t arena_bytes = 0;
  for (i64 const wanted : wanted_tokens) {
    auto const p = partition_of(tokens_of(wanted));
    std::size_t const g = static_cast<std::size_t>(p.global_rows()) * row, l = static_cast<std::size_t>(p.local_rows()) * row;
    arena_bytes = std::max(arena_bytes, scratch_arena::footprint({g, l, g, g, sizeof(unsigned long long)}));
  }
  arena_bytes += scratch_arena::footprint({sizeof(std::uint32_t)});
  scratch_arena arena(arena_bytes, "cp bandwidth");
  use_arena use(arena);
  device_barrier const bar(s);
  auto barrier = [&] { bar(world, s); };
  quiesce(st, r, "cp bandwidth: setup done", s);

  collective_phase(st, [&] {
    for (i64 const wanted : wanted_tokens) {
      arena_scope scope;
      i64 const tokens = tokens_of(wanted);
      st.wd.phase(r, headroom::detail::concat("cp bandwidth: ", tokens, " tokens"));
      auto const p = partition_of(tokens);
      // Stream-ordered (cudaMallocAsync / cudaFreeAsync from the device's default pool, whose
      // release threshold main() raises so that nothing is unmapped at a synchronize).
      cp::cuda::device_cu_seqlens dcu(p.global_cu_seqlens(), s);
      std::size_t const global_bytes = static_cast<std::size_t>(p.global_rows()) * row;
      std::size_t const local_bytes = static_cast<std::size_t>(p.local_rows()) * row;
      dbuf<bf16> global(static_cast<std::size_t>(p.global_rows() * width)), local(static_cast<std::size_t>(p.local_rows() * width)),
          out(global.size()), ws(global.size());
      dbuf<unsigned long long> bad(1);
      u64 const pattern_seed = mix64(st.opt.seed ^ static_cast<u64>(tokens));
      pattern_kernel<<<1024, 256, 0, s.get()>>>(reinterpret_cast<std::uint16_t*>(global.data()), p.global_rows(), width, pattern_seed);
      HEADROOM_CUDA_CHECK_LAST();
      auto const g_v = cp::matrix_view<bf16 const>(global.data(), p.global_rows(), width);
      auto const l_v = cp::matrix_view<bf16>(local.data(), p.local_rows(), width);
      auto const o_v = cp::matrix_view<bf16>(out.data(), p.global_rows(), width);
      auto const w_v = cp::matrix_view<bf16>(ws.data(), p.global_rows(), width);
      auto const l_c = cp::matrix_view<bf16 const>(l_v);

      // Correctness at the benchmark shape: gather(split(x)) == x, checked on device.
      local.poison(s);
      out.poison(s);
      bad.poison(s, 0);
      cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), g_v, l_v, s);
      cp::cuda::gather<cp::vector_policy::require_16>(world, p, dcu.view(), l_c, o_v, w_v, s);
      check_pattern_kernel<<<1024, 256, 0, s.get()>>>(reinterpret_cast<std::uint16_t const*>(out.data()), p.global_rows(), width,
                                                      pattern_seed, bad.data());
      HEADROOM_CUDA_CHECK_LAST();
      auto const wrong = bad.download(s)[0];
      st.checks.record("cp", headroom::detail::concat("cp=", n, " (world) ", tokens, " x ", width,
                                                      " bf16: gather(split(x)) == x at the bandwidth shape"),
                       wrong == 0, r, headroom::detail::concat(wrong, " wrong elements"));

      double const split_ms = median_ms(s, warm, it, spin, [&] {
        cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), g_v, l_v, s);
      });
      double const split_cpy = median_ms(s, warm, it, spin, [&] {
        HEADROOM_CUDA_TRY(cudaMemcpyAsync(local.data(), global.data(), local_bytes, cudaMemcpyDeviceToDevice, s.get()));
      });
      put("split", tokens, local_bytes, "memcpy", split_ms, split_cpy);
      double const reorder_ms = median_ms(s, warm, it, spin, [&] {
        cp::cuda::to_sequence_order<cp::vector_policy::require_16>(p, dcu.view(), cp::matrix_view<bf16 const>(w_v), o_v, s);
      });
      double const reorder_cpy = median_ms(s, warm, it, spin, [&] {
        HEADROOM_CUDA_TRY(cudaMemcpyAsync(out.data(), ws.data(), global_bytes, cudaMemcpyDeviceToDevice, s.get()));
      });
      put("reorder", tokens, global_bytes, "memcpy", reorder_ms, reorder_cpy);
      // Restore the shard (the memcpy peer overwrote it), then the whole gather against a bare all_gather.
      cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), g_v, l_v, s);
      double const gather_ms = median_ms(s, warm, it, barrier, [&] {
        cp::cuda::gather<cp::vector_policy::require_16>(world, p, dcu.view(), l_c, o_v, w_v, s);
      });
      double const ag_ms = median_ms(s, warm, it, barrier, [&] {
        world.all_gather(std::span<bf16 const>(local.data(), local.size()), std::span<bf16>(ws.data(), ws.size()), s);
      });
      put("gather", tokens, global_bytes, "nccl all_gather", gather_ms, ag_ms);
      // The timed gathers must have left x in place too.
      bad.poison(s, 0);
      cp::cuda::gather<cp::vector_policy::require_16>(world, p, dcu.view(), l_c, o_v, w_v, s);
      check_pattern_kernel<<<1024, 256, 0, s.get()>>>(reinterpret_cast<std::uint16_t const*>(out.data()), p.global_rows(), width,
                                                      pattern_seed, bad.data());
      HEADROOM_CUDA_CHECK_LAST();
      auto const wrong2 = bad.download(s)[0];
      st.checks.record("cp", headroom::detail::concat("cp=", n, " (world) ", tokens, " x ", width,
                                                      " bf16: gather output still exact after the timed runs"),
                       wrong2 == 0, r, headroom::detail::concat(wrong2, " wrong elements"));
    }
  });
  quiesce(st, r, "cp bandwidth: teardown", s);
}

void print_cp_table(shared_state& st) {
  std::lock_guard lock(st.m);
  std::printf("\n[cp] bandwidth at cp = %d (world), bf16, medians of %d runs after %d warm-up, CUDA events.\n", st.world,
              st.opt.bw_iterations, st.opt.bw_warmup);
  std::printf("     split / reorder GB/s = (read + written) / time; gather GB/s = output bytes / time (algbw).\n");
  std::printf("     rank 0 and the slowest rank; the peer is a D2D cudaMemcpyAsync of the same output bytes, or a bare NCCL all_gather.\n");
  std::printf("%-8s %7s %5s %3s %9s | %9s %8s %9s | %-15s %9s %8s | %8s\n", "op", "tokens", "width", "cp", "out MiB", "ms r0",
              "GB/s r0", "ms worst", "peer", "peer ms", "GB/s", "ours/peer");
  for (auto const& row : st.bw) {
    double const ours = row.ours_ms.empty() ? 0 : row.ours_ms[0];
    double const worst = row.ours_ms.empty() ? 0 : *std::max_element(row.ours_ms.begin(), row.ours_ms.end());
    double const peer = row.peer_ms.empty() ? 0 : row.peer_ms[0];
    double const factor = row.op == "gather" ? 1.0 : 2.0;
    auto gbps = [&](double ms) { return ms > 0 ? factor * static_cast<double>(row.bytes_out) / (ms * 1e-3) / 1e9 : 0.0; };
    std::printf("%-8s %7lld %5lld %3d %9.1f | %9.3f %8.0f %9.3f | %-15s %9.3f %8.0f | %7.1f%%\n", row.op.c_str(),
                static_cast<long long>(row.tokens), static_cast<long long>(row.width), row.cp,
                static_cast<double>(row.bytes_out) / (1 << 20), ours, gbps(ours), worst, row.peer.c_str(), peer, gbps(peer),
                ours > 0 ? 100.0 * peer / ours : 0.0);
  }
  std::fflush(stdout);
}

// =============================================================================================
// [stats]
// =============================================================================================

/// Rank q's report of `keys` keys in group `group` for `trial`: every rank can rebuild every
/// peer's. Even keys int64, odd keys double; awkward values and ties on purpose.
hs::dynamic_report stats_report(u64 seed, int group_size, int group, std::size_t keys, int trial, int q) {
  hs::dynamic_report rep;
  for (std::size_t i = 0; i < keys; ++i) {
    std::string const name = "memory/key." + std::to_string(i);
    bool const tie = i % 8 == 3;  // every rank reports the same value: argmax / argmin go to rank 0
    u64 const h = mix64(seed ^ mix64(static_cast<u64>(group_size) << 48 ^ static_cast<u64>(group) << 40 ^
                                     static_cast<u64>(trial) << 32 ^ static_cast<u64>(i) << 8 ^ (tie ? 0xFFull : static_cast<u64>(q))));
    int const pick = static_cast<int>(h % 10);
    if (i % 2 == 0) {
      std::int64_t v = 0;
      switch (pick) {
        case 0: v = std::numeric_limits<std::int64_t>::max() - static_cast<std::int64_t>(h >> 60); break;
        case 1: v = std::numeric_limits<std::int64_t>::min() + static_cast<std::int64_t>(h >> 60); break;
        case 2: v = (std::int64_t{1} << 53) + static_cast<std::int64_t>(h >> 59); break;  // doubles would round these
        case 3: v = -static_cast<std::int64_t>(h >> 40); break;
        default: v = static_cast<std::int64_t>(h >> 1); break;
      }
      rep.set(name, v);
    } else {
      double v = 0;
      switch (pick) {
        case 0: v = std::numeric_limits<double>::infinity(); break;
        case 1: v = -std::numeric_limits<double>::infinity(); break;
        case 2: v = -0.0; break;
        case 3: v = 0.0; break;
        case 4: v = std::numeric_limits<double>::denorm_min(); break;
        default: v = std::ldexp(static_cast<double>(static_cast<std::int64_t>(h)), -static_cast<int>(h % 80)); break;
      }
      rep.set(name, v);
    }
  }
  return rep;
}

/// Expected gather summary: max / min / argmax / argmin under the total order (ties to the
/// lowest rank), and the mean as the reducer computes it (long double sum in rank order).
struct expected_summary {
  std::vector<hs::value> max, min;
  std::vector<int> argmax, argmin;
  std::vector<double> mean;
};
bool value_less(hs::value const& a, hs::value const& b);
expected_summary expected_of(std::vector<hs::dynamic_report> const& all) {
  std::size_t const keys = all.at(0).size();
  int const g = static_cast<int>(all.size());
  expected_summary e{std::vector<hs::value>(keys), std::vector<hs::value>(keys), std::vector<int>(keys, 0),
                     std::vector<int>(keys, 0), std::vector<double>(keys)};
  for (std::size_t i = 0; i < keys; ++i) {
    e.max[i] = e.min[i] = all[0][i].value;
    long double sum = 0;
    for (int k = 0; k < g; ++k) {
      auto const& v = all[static_cast<std::size_t>(k)][i].value;
      if (value_less(e.max[i], v)) e.max[i] = v, e.argmax[i] = k;
      if (value_less(v, e.min[i])) e.min[i] = v, e.argmin[i] = k;
      sum += hs::to_double(v);
    }
    e.mean[i] = static_cast<double>(sum / static_cast<long double>(g));
  }
  return e;
}

/// IEEE total order without NaN: -0.0 < +0.0.
bool value_less(hs::value const& a, hs::value const& b) {
  if (a.index() == 0) return std::get<0>(a) < std::get<0>(b);
  double const x = std::get<1>(a), y = std::get<1>(b);
  if (x == y) return std::signbit(x) && !std::signbit(y);
  return x < y;
}
bool value_same(hs::value const& a, hs::value const& b) {
  if (a.index() != b.index()) return false;
  if (a.index() == 0) return std::get<0>(a) == std::get<0>(b);
  return std::bit_cast<u64>(std::get<1>(a)) == std::bit_cast<u64>(std::get<1>(b));
}

using staging = hs::cuda::blocking_device_staging;

void stats_section(shared_state& st, nccl::communicator& world, hc::stream_view s) {
  int const n = world.size();
  int const r = world.rank();
  std::vector<int> sizes{2};
  if (n >= 4) sizes.push_back(4);
  else st.skip(r, "stats: PP group of 4 (needs 4 GPUs)");
  if (n >= 8) sizes.push_back(8);
  else st.skip(r, "stats: PP group of 8 (needs 8 GPUs)");

  constexpr std::array<std::size_t, 3> key_counts{8, 64, 512};

  // Setup phase: every group size's communicator (collective over the world: every rank calls
  // every split) and every buffer, once, sized for the largest (group size, key count). These
  // were made and freed per (group size, key count) before: cudaMalloc / cudaMallocHost and
  // cudaFree / cudaFreeHost between one rank's collectives while a peer's NCCL kernel waited
  // for that rank hung the first 2-GPU run.
  quiesce(st, r, "stats: setup", s);
  std::vector<nccl::communicator> groups_of(sizes.size());
  std::size_t ws_max = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    int const g = sizes[i];
    bool const member = r < n / g * g;
    st.wd.phase(r, headroom::detail::concat("stats: setup, split for PP group of ", g));
    groups_of[i] = world.split(member ? r / g : nccl::communicator::no_color, r);
    for (std::size_t keys : key_counts) ws_max = std::max(ws_max, staging::workspace_bytes(hs::reduce_plan(keys), g));
  }
  tracked watched(st.wd);  // after the communicators: leaves the watchdog's list before they die
  for (auto& c : groups_of) watched.add(c);
  std::size_t const max_keys = key_counts.back();
  hs::workspace<hc::device_resource, hc::stream_view> dev(hc::device_resource{}, s, ws_max);
  hs::workspace<hc::pinned_resource, hc::stream_view> pinned(hc::pinned_resource{}, s, ws_max);
  hs::workspace<hc::pinned_resource, hc::stream_view> host_words(hc::pinned_resource{}, s, 2 * max_keys * sizeof(std::int64_t));
  scratch_arena arena(scratch_arena::footprint({2 * max_keys * sizeof(std::int64_t), sizeof(std::uint32_t)}), "stats");
  use_arena use(arena);
  dbuf<std::int64_t> d(2 * max_keys);
  device_barrier const bar(s);
  quiesce(st, r, "stats: setup done", s);

  collective_phase(st, [&] {
    for (std::size_t gi = 0; gi < sizes.size(); ++gi) {
      int const g = sizes[gi];
      int const groups = n / g;
      bool const member = r < groups * g;
      int const group = r / g;
      if (!member) continue;
      nccl::communicator& pp = groups_of[gi];
      int const q = pp.rank();
      std::string const tag = headroom::detail::concat("PP group of ", g);
      st.checks.record("stats", tag + ": split group has the expected size and rank", pp.size() == g && q == r % g, r,
                       headroom::detail::concat("got ", q, "/", pp.size()));
      for (std::size_t keys : key_counts) {
        hs::reduce_plan const plan(keys);
        std::size_t const ws_bytes = staging::workspace_bytes(plan, g);
        // This case's share of the buffers made in the setup phase (no allocation here).
        hs::reducer<staging> reduce(plan, staging(dev.bytes().first(ws_bytes), pinned.bytes().first(ws_bytes)));
        std::string const kt = headroom::detail::concat(tag, ", ", keys, " keys");
        st.wd.phase(r, "stats: " + kt);
        auto poison = [&] {
          HEADROOM_CUDA_TRY(cudaMemsetAsync(dev.data(), 0xA5, ws_bytes, s.get()));
          s.synchronize();
        };
        for (int trial = 0; trial < 3; ++trial) {
          std::vector<hs::dynamic_report> all;
          for (int k = 0; k < g; ++k) all.push_back(stats_report(st.opt.seed, g, group, keys, trial, k));
          hs::dynamic_report const mine = all[static_cast<std::size_t>(q)];
          hs::dynamic_report const before = mine;
          auto const e = expected_of(all);
          auto const& emax = e.max;
          auto const& emin = e.min;
          auto const& eargmax = e.argmax;
          auto const& eargmin = e.argmin;
          auto const& emean = e.mean;
          hs::dynamic_report const expect = mine.with_values(emax);
          std::string const td = headroom::detail::concat("trial ", trial, ", seed ", st.opt.seed);

          poison();
          auto const got = reduce.max(mine, pp, s);
          std::string why;
          if (!(got == expect))
            for (std::size_t i = 0; i < keys && why.empty(); ++i)
              if (!value_same(got[i].value, emax[i])) {
                std::ostringstream os;
                os << td << ": key " << got[i].name << " got ";
                hs::print_value(os, got[i].value) << ", expected ";
                hs::print_value(os, emax[i]);
                why = os.str();
              }
          st.checks.record("stats", kt + ": reducer::max == per-key max over the group (bitwise)", got == expect, r,
                           why.empty() ? td : why);
          st.checks.record("stats", kt + ": reducer::max leaves its input unchanged", mine == before, r, td);

          poison();
          auto const table = reduce.gather(mine, pp, s);
          bool ok = table.ranks() == g && table.size() == keys;
          std::string gwhy = ok ? std::string{} : headroom::detail::concat("table of ", table.ranks(), " ranks, ", table.size(), " keys");
          for (std::size_t i = 0; i < keys && ok; ++i) {
            auto const& row = table.rows()[i];
            bool per_rank = row.per_rank.size() == static_cast<std::size_t>(g);
            for (int k = 0; k < g && per_rank; ++k)
              per_rank = value_same(row.per_rank[static_cast<std::size_t>(k)], all[static_cast<std::size_t>(k)][i].value);
            bool const mean_ok = std::bit_cast<u64>(row.mean) == std::bit_cast<u64>(emean[i]) ||
                                 (std::isnan(row.mean) && std::isnan(emean[i]));
            ok = row.name == all[0][i].name && per_rank && value_same(row.max, emax[i]) && value_same(row.min, emin[i]) &&
                 row.argmax == eargmax[i] && row.argmin == eargmin[i] && mean_ok;
            if (!ok)
              gwhy = headroom::detail::concat(td, ": key ", row.name, " argmax ", row.argmax, " (expected ", eargmax[i], "), argmin ",
                                              row.argmin, " (expected ", eargmin[i], "), per-rank values ",
                                              per_rank ? "equal" : "differ", ", mean ", row.mean, " (expected ", emean[i], ")");
          }
          st.checks.record("stats", kt + ": reducer::gather table == every rank's values, max/argmax/min/argmin/mean (exact)", ok,
                           r, gwhy);
        }

        // Latency: the reducer beside a bare ncclAllReduce of keys x int64 on the same group.
        hs::dynamic_report const mine = stats_report(st.opt.seed, g, group, keys, 0, q);
        st.wd.phase(r, "stats: " + kt + ", latency");
        auto* h = static_cast<std::int64_t*>(host_words.data());
        for (std::size_t i = 0; i < 2 * keys; ++i) h[i] = static_cast<std::int64_t>(i) * (q + 1);
        std::size_t const bytes = keys * sizeof(std::int64_t);
        ncclComm_t const raw = pp.get();
        auto nccl_device = [&] {
          HEADROOM_NCCL_TRY(ncclAllReduce(d.data(), d.data() + keys, keys, ncclInt64, ncclMax, raw, s.get()));
          s.synchronize();
        };
        auto nccl_staged = [&] {
          HEADROOM_CUDA_TRY(cudaMemcpyAsync(d.data(), h, bytes, cudaMemcpyHostToDevice, s.get()));
          HEADROOM_NCCL_TRY(ncclAllReduce(d.data(), d.data() + keys, keys, ncclInt64, ncclMax, raw, s.get()));
          HEADROOM_CUDA_TRY(cudaMemcpyAsync(h + keys, d.data() + keys, bytes, cudaMemcpyDeviceToHost, s.get()));
          s.synchronize();
        };
        hs::dynamic_report sink;
        hs::rank_table tsink;
        auto do_max = [&] { sink = reduce.max(mine, pp, s); };
        auto do_gather = [&] { tsink = reduce.gather(mine, pp, s); };
        struct timing {
          double wall = 0, event = 0;
        };
        auto measure = [&](std::function<void()> const& op) {
          hc::event a(hc::event_options{.timing = true}), b(hc::event_options{.timing = true});
          for (int i = 0; i < st.opt.lat_warmup; ++i) op();
          bar(pp, s);
          s.synchronize();
          std::vector<double> wall, ev;
          for (int i = 0; i < st.opt.lat_iterations; ++i) {
            a.record(s);
            auto const t0 = std::chrono::steady_clock::now();
            op();
            auto const t1 = std::chrono::steady_clock::now();
            b.record(s);
            b.synchronize();
            wall.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            ev.push_back(1000.0 * elapsed_ms(a, b));
          }
          return timing{median(wall), median(ev)};
        };
        timing const t_dev = measure(nccl_device), t_staged = measure(nccl_staged), t_max = measure(do_max),
                     t_gather = measure(do_gather);
        bool staged_ok = true;
        for (std::size_t i = 0; i < keys; ++i) staged_ok = staged_ok && h[keys + i] == static_cast<std::int64_t>(i) * g;
        st.checks.record("stats", kt + ": bare ncclAllReduce(max) peer gives the expected max", staged_ok, r);
        std::vector<hs::dynamic_report> all0;
        for (int k = 0; k < g; ++k) all0.push_back(stats_report(st.opt.seed, g, group, keys, 0, k));
        st.checks.record("stats", kt + ": reducer::max and gather still exact after the timed calls",
                         sink == mine.with_values(expected_of(all0).max) && tsink.size() == keys && tsink.ranks() == g, r);
        if (r == 0) {
          std::lock_guard lock(st.m);
          st.lat.push_back({g, keys, t_max.wall, t_max.event, t_gather.wall, t_dev.wall, t_staged.wall});
        }
      }
    }
  });
  // Teardown phase: buffers and communicators die at return, every rank past its last collective.
  quiesce(st, r, "stats: teardown", s);
}

void print_stats_table(shared_state& st) {
  std::lock_guard lock(st.m);
  std::printf("\n[stats] latency on world rank 0's group, median microseconds over %d calls after %d warm-up (host wall clock;\n",
              st.opt.lat_iterations, st.opt.lat_warmup);
  std::printf("        nccl_staged = H2D + ncclAllReduce(max) of keys x int64 + D2H + sync, pinned; nccl_device = the collective alone)\n");
  std::printf("%5s %5s %8s | %10s %10s %11s %12s %11s | %9s %9s\n", "group", "keys", "bytes", "max", "max(event)", "gather",
              "nccl_staged", "nccl_device", "max/stag", "max/dev");
  for (auto const& l : st.lat)
    std::printf("%5d %5zu %8zu | %10.1f %10.1f %11.1f %12.1f %11.1f | %9.3f %9.3f\n", l.group, l.keys, l.keys * 8, l.max_wall,
                l.max_event, l.gather_wall, l.nccl_staged_wall, l.nccl_device_wall,
                l.nccl_staged_wall > 0 ? l.max_wall / l.nccl_staged_wall : 0.0,
                l.nccl_device_wall > 0 ? l.max_wall / l.nccl_device_wall : 0.0);
  std::fflush(stdout);
}

// =============================================================================================
// [pool]
// =============================================================================================

__host__ __device__ inline u64 shard_key(u64 base, int rank) { return mix64(base ^ (static_cast<u64>(rank) + 1) * 0xD1B54A32D192ED03ull); }
__host__ __device__ inline std::uint32_t shard_word(u64 key, u64 i) {
  return static_cast<std::uint32_t>(mix64(key + i * 0x9E3779B97F4A7C15ull));
}
u64 unit_key(u64 seed, int step, std::size_t unit, std::size_t bucket) {
  return mix64(seed ^ mix64(static_cast<u64>(step) << 40 ^ static_cast<u64>(unit) << 8 ^ static_cast<u64>(bucket)));
}

__global__ void fill_shard_kernel(std::uint32_t* shard, u64 words, u64 key) {
  for (u64 i = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x; i < words; i += static_cast<u64>(gridDim.x) * blockDim.x)
    shard[i] = shard_word(key, i);
}
/// Counts words of the gathered slot that differ from the rank-major concatenation of shards.
__global__ void verify_gathered_kernel(std::uint32_t const* slot, u64 shard_words, int ranks, u64 base,
                                       unsigned long long* bad) {
  unsigned long long mine = 0;
  for (int r = 0; r < ranks; ++r) {
    u64 const key = shard_key(base, r);
    std::uint32_t const* part = slot + static_cast<u64>(r) * shard_words;
    for (u64 i = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x; i < shard_words; i += static_cast<u64>(gridDim.x) * blockDim.x)
      mine += part[i] != shard_word(key, i);
  }
  if (mine != 0) atomicAdd(bad, mine);
}

void pool_section(shared_state& st, nccl::communicator& world, hc::stream_view s) {
  int const n = world.size();
  int const r = world.rank();
  using namespace headroom::pool;
  // A real hybrid workload: Nemotron-3-Nano-30B-A3B at expert parallel 8 (52 units of 3 kinds).
  auto const cfg = models::nemotron_3_nano_30b_a3b();
  workload const w = models::make_workload(cfg, {.expert_parallel = 8});
  // Pad each bucket to whole shards of 64 elements per rank, so that it all-gathers evenly.
  auto const plan = make_plan<pool::max>(w, {.buffers = 2}, pad_elements{static_cast<u64>(n) * 64});
  std::size_t const units = plan.unit_count();
  std::size_t max_buckets = 0;
  for (auto const& b : plan.bucket_bytes) max_buckets = std::max(max_buckets, b.size());
  std::vector<std::size_t> shard_words(max_buckets, 0);
  u64 per_step = 0;
  for (std::size_t u = 0; u < units; ++u)
    for (std::size_t b = 0; b < plan.bucket_bytes[u].size(); ++b) {
      u64 const bytes = plan.bucket_bytes[u][b];
      expects<logic_error>(bytes % (4ull * static_cast<u64>(n)) == 0, "pool: bucket of ", bytes, " bytes does not split into uint32 shards");
      shard_words[b] = std::max<std::size_t>(shard_words[b], static_cast<std::size_t>(bytes / 4 / static_cast<u64>(n)));
      per_step += bytes;
    }
  // The pool below keeps NonUnit = dynamic, whose acquire / release would call the upstream
  // (ncclMemAlloc / ncclMemFree: synchronising) between all-gathers for a unit the plan leaves
  // out. The max plan pools every unit, and non-unit buckets are never acquired here.
  expects<logic_error>(plan.pooled_units() == units, "pool: the max plan pools ", plan.pooled_units(), " of ", units,
                       " units; the others would allocate at acquire, between collectives");

  // Setup phase: streams, events, the shards and counters (one arena), the nccl_mem_resource
  // pool, all before the first collective.
  quiesce(st, r, "pool: setup", s);
  hc::stream home, ag, compute;
  hc::event gathered;
  std::atomic<u64> logged_moves{0};
  std::size_t arena_bytes = scratch_arena::footprint({2 * sizeof(i64), units * max_buckets * sizeof(unsigned long long)});
  for (auto words : shard_words) arena_bytes += scratch_arena::footprint({words * sizeof(std::uint32_t)});
  scratch_arena arena(arena_bytes, "pool");
  use_arena use(arena);
  dbuf<i64> f(2);
  std::vector<dbuf<std::uint32_t>> shards;
  shards.reserve(max_buckets);
  for (auto words : shard_words) shards.emplace_back(words);
  dbuf<unsigned long long> bad(units * max_buckets);
  pool_result res;
  res.workload = w.name;
  res.arena_bytes = plan.arena_bytes;
  res.units = units;
  res.slots = plan.slots.size();
  res.shapes = plan.shapes.size();
  res.gathered_bytes_per_step = per_step;
  {
    cuda_unit_pool<nccl::nccl_mem_resource, strict> pool(plan, {}, home.view(),
                                                         strict([&](move_event const&) { logged_moves.fetch_add(1); }));
    HEADROOM_CUDA_TRY(cudaMemsetAsync(pool.arena(), 0xFF, pool.arena_bytes(), home.get()));
    home.synchronize();
    quiesce(st, r, "pool: setup done", s);

    collective_phase(st, [&] {
      // Plans are deterministic: every rank must hold the same slots at the same offsets.
      u64 fp = mix64(plan.arena_bytes);
      for (auto const& sl : plan.slots) fp = mix64(fp ^ mix64(sl.offset * 31 + sl.bytes));
      i64 const h = static_cast<i64>(fp >> 2);
      f.upload({h, -h}, s);
      world.all_reduce(std::span<i64 const>(f.data(), 2), std::span<i64>(f.data(), 2), reduce_op::max, s);
      auto const got = f.download(s);
      st.checks.record("pool", "the plan is the same on every rank (fingerprint max == min over the world)",
                       got[0] == h && got[1] == -h, r);
    });
    // ncclCommRegister can synchronise: between host barriers, with no collective in flight.
    quiesce(st, r, "pool: before the first registration", s);
    st.wd.phase(r, "pool: first ncclCommRegister");
    auto t0 = std::chrono::steady_clock::now();
    nccl::registration reg = register_arena(world, pool);  // once, for every slot of every unit
    res.reg_first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    st.checks.record("pool", "arena registered once with the N-rank world communicator (covers the whole arena)",
                     reg.active() && reg.size() == pool.arena_bytes() && reg.data() == pool.arena(), r);
    quiesce(st, r, "pool: registered", s);

    std::vector<std::vector<std::byte*>> first_addresses(units);
    collective_phase(st, [&] {
      for (int step = 0; step < st.opt.steps; ++step) {
        bool const backward = step % 2 == 1;
        bad.poison(s, 0);
        quiesce(st, r, headroom::detail::concat("pool: before step ", step), {s, ag.view(), compute.view()});
        st.wd.phase(r, headroom::detail::concat("pool: step ", step));
        auto const start = std::chrono::steady_clock::now();
        std::vector<std::vector<std::byte*>> addresses(units);
        using lease_t = decltype(pool)::lease;
        std::vector<lease_t> held(units);
        auto unit_at = [&](std::size_t i) { return backward ? units - 1 - i : i; };
        auto gather = [&](std::size_t u) {
          held[u] = pool.acquire(u, ag.view());
          for (std::size_t b = 0; b < held[u].size(); ++b) {
            auto const slot = held[u].view<std::uint32_t>(b);
            std::size_t const words = slot.size() / static_cast<std::size_t>(n);
            HEADROOM_CUDA_TRY(cudaMemsetAsync(slot.data(), 0xFF, slot.size_bytes(), ag.get()));  // poison
            fill_shard_kernel<<<264, 256, 0, ag.get()>>>(shards[b].data(), words, shard_key(unit_key(st.opt.seed, step, u, b), r));
            HEADROOM_CUDA_CHECK_LAST();
            world.all_gather(std::span<std::uint32_t const>(shards[b].data(), words), slot, ag.view());
          }
        };
        gather(unit_at(0));
        for (std::size_t i = 0; i < units; ++i) {
          std::size_t const u = unit_at(i);
          gathered.record(ag.view());
          gathered.wait_on(compute.view());
          if (i + 1 < units) gather(unit_at(i + 1));  // prefetch the next unit while this one is consumed
          for (std::size_t b = 0; b < held[u].size(); ++b) {
            auto const slot = held[u].view<std::uint32_t>(b);
            addresses[u].push_back(held[u].bytes(b).data());
            verify_gathered_kernel<<<264, 256, 0, compute.get()>>>(slot.data(), slot.size() / static_cast<std::size_t>(n), n,
                                                                    unit_key(st.opt.seed, step, u, b), bad.data() + u * max_buckets + b);
            HEADROOM_CUDA_CHECK_LAST();
          }
          pool.release(held[u], compute.view());
        }
        compute.synchronize();
        ag.synchronize();
        res.step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        auto const counts = bad.download(s);
        u64 wrong = 0;
        std::size_t first_bad = units;
        for (std::size_t u = 0; u < units; ++u)
          for (std::size_t b = 0; b < max_buckets; ++b)
            if (counts[u * max_buckets + b] != 0) {
              wrong += counts[u * max_buckets + b];
              if (first_bad == units) first_bad = u;
            }
        st.checks.record("pool", headroom::detail::concat("step ", step, backward ? " (backward order)" : " (forward order)",
                                                          ": all-gathers into leased slots == concatenation of every rank's shard"),
                         wrong == 0, r,
                         headroom::detail::concat(wrong, " wrong words, first in unit ", first_bad, first_bad < units ? plan.unit_names[first_bad] : ""));
        bool inside = true;
        for (auto const& a : addresses)
          for (auto* p : a) inside = inside && p >= pool.arena() && p < pool.arena() + pool.arena_bytes();
        st.checks.record("pool", headroom::detail::concat("step ", step, ": every leased slot lies in the registered arena"), inside, r);
        if (step == 0) {
          first_addresses = addresses;
        } else {
          std::size_t moved = 0;
          for (std::size_t u = 0; u < units; ++u) moved += addresses[u] != first_addresses[u];
          st.checks.record("pool", headroom::detail::concat("step ", step, ": strict assignment, every unit at the same addresses as in step 0"),
                           moved == 0, r, headroom::detail::concat(moved, " units changed address"));
        }
        st.checks.record("pool", headroom::detail::concat("step ", step, ": all slots released at the end of the pass"),
                         pool.stats().slots_in_use == 0, r, headroom::detail::concat(pool.stats().slots_in_use, " in use"));
      }
    });
    res.moves = pool.stats().moves;
    res.cross_stream_waits = pool.stats().cross_stream_waits;
    st.checks.record("pool", "strict assignment: no bucket moved (pool stats and logger)", res.moves == 0 && logged_moves.load() == 0, r,
                     headroom::detail::concat(res.moves, " moves, ", logged_moves.load(), " logged"));
    st.checks.record("pool", "prefetching ordered slot reuse across streams (cross-stream waits > 0)", res.cross_stream_waits > 0, r);
    st.checks.record("pool", "peak slots in use <= the plan's slots", pool.stats().slots_in_use_peak <= pool.stats().slots_total, r);

    // Registration cost: deregister, then rounds of register / deregister, each round between
    // host barriers (ncclCommRegister / ncclCommDeregister can synchronise; no collective runs
    // in these rounds).
    quiesce(st, r, "pool: registration rounds", {s, ag.view(), compute.view()});
    st.wd.phase(r, "pool: registration rounds");
    reg.reset();
    std::vector<double> regs, deregs;
    for (int k = 0; k < st.opt.reg_rounds; ++k) {
      quiesce(st, r, headroom::detail::concat("pool: registration round ", k), s);
      auto const a = std::chrono::steady_clock::now();
      reg = register_arena(world, pool);
      auto const b = std::chrono::steady_clock::now();
      reg.reset();
      auto const c = std::chrono::steady_clock::now();
      regs.push_back(std::chrono::duration<double, std::milli>(b - a).count());
      deregs.push_back(std::chrono::duration<double, std::milli>(c - b).count());
    }
    res.reg_median_ms = median(regs);
    res.dereg_median_ms = median(deregs);
    quiesce(st, r, "pool: ncclMemAlloc pool teardown", s);  // then ncclMemFree of the arena
  }
  {
    // Peer: a cudaMalloc arena of the same size, registered the same way.
    quiesce(st, r, "pool: cudaMalloc pool setup", s);
    cuda_unit_pool<hc::device_resource, strict> pool(plan, {}, home.view());
    std::vector<double> regs;
    double first = 0;
    for (int k = 0; k <= st.opt.reg_rounds; ++k) {
      quiesce(st, r, headroom::detail::concat("pool: cudaMalloc arena registration round ", k), s);
      auto const a = std::chrono::steady_clock::now();
      nccl::registration reg = register_arena(world, pool);
      double const ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
      if (k == 0) first = ms;  // the first registration of this arena, alone
      else regs.push_back(ms);
      reg.reset();
    }
    res.malloc_reg_first_ms = first;
    res.malloc_reg_median_ms = median(regs);
    quiesce(st, r, "pool: cudaMalloc pool teardown", s);  // then cudaFree of the arena
  }
  if (r == 0) {
    std::lock_guard lock(st.m);
    st.pool = res;
  }
}

void print_pool_table(shared_state& st) {
  std::lock_guard lock(st.m);
  auto const& p = st.pool;
  std::printf("\n[pool] %s: max plan, 2 buffers, %zu units, %zu shapes, %zu slots, arena %.1f MiB; %.2f GiB all-gathered per step per rank\n",
              p.workload.c_str(), p.units, p.shapes, p.slots, static_cast<double>(p.arena_bytes) / (1 << 20),
              static_cast<double>(p.gathered_bytes_per_step) / (1ull << 30));
  std::printf("%-44s %12s\n", "registration on the world communicator (rank 0)", "ms");
  std::printf("%-44s %12.3f\n", "ncclMemAlloc arena: first ncclCommRegister", p.reg_first_ms);
  std::printf("%-44s %12.3f\n", "ncclMemAlloc arena: register, median", p.reg_median_ms);
  std::printf("%-44s %12.3f\n", "ncclMemAlloc arena: deregister, median", p.dereg_median_ms);
  std::printf("%-44s %12.3f\n", "cudaMalloc arena: first ncclCommRegister", p.malloc_reg_first_ms);
  std::printf("%-44s %12.3f\n", "cudaMalloc arena: register, median", p.malloc_reg_median_ms);
  std::printf("%-6s %12s %10s\n", "step", "wall ms", "GB/s out");
  for (std::size_t i = 0; i < p.step_ms.size(); ++i)
    std::printf("%-6zu %12.2f %10.0f\n", i, p.step_ms[i],
                p.step_ms[i] > 0 ? static_cast<double>(p.gathered_bytes_per_step) / (p.step_ms[i] * 1e-3) / 1e9 : 0.0);
  std::printf("moves %llu, cross-stream waits %llu\n", static_cast<unsigned long long>(p.moves),
              static_cast<unsigned long long>(p.cross_stream_waits));
  std::fflush(stdout);
}

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
    expects(n >= 2, "bench_scale_validation: needs at least 2 GPUs, found ", n);
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
        std::fprintf(stderr, "bench_scale_validation: WATCHDOG: %s; aborting the NCCL communicators\n", what.c_str());
        std::printf("WATCHDOG: %s; aborting the NCCL communicators\n", what.c_str());
        std::fflush(stdout);
        std::fflush(stderr);
        st.fail_fast();
        auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
        while (!stop.stop_requested() && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (stop.stop_requested()) return;
        std::fprintf(stderr, "bench_scale_validation: WATCHDOG: ranks still stuck 15 s after the abort: %s; exiting\n",
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
    std::fprintf(stderr, "bench_scale_validation: %s\n", e.what());
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
