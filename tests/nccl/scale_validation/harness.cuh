// SPDX-License-Identifier: Apache-2.0
#pragma once
// Scale validation harness: options, the check ledger, and hang safety (host gate, watchdog).
// Part of tests/nccl/scale_validation.cu (one program; this folder is not globbed as programs).
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

using namespace headroom;
namespace hc = headroom::cuda;
using bf16 = __nv_bfloat16;
using i64 = std::int64_t;
using u64 = std::uint64_t;

namespace scale_validation {

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
    expects(i + 1 < argc, "test_nccl_scale_validation: ", a, " needs a value");
    char const* v = argv[++i];
    char* end = nullptr;
    unsigned long long const n = std::strtoull(v, &end, 10);
    expects(end != v && *end == '\0', "test_nccl_scale_validation: ", a, " expects a non-negative integer, got '", v, "'");
    auto small = [&](int lo) {
      expects(n >= static_cast<unsigned long long>(lo) && n < (1ull << 24), "test_nccl_scale_validation: ", a, " = ", n,
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
      throw invalid_argument(headroom::detail::concat("test_nccl_scale_validation: unknown option ", a,
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

}  // namespace scale_validation
