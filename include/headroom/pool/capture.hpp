// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// capture_scope: a unit_pool's contract for CUDA graph capture, checked instead of remembered.
//
//   pool::capture_scope scope(pool);          // forgets every release event: nothing inside
//   ... acquire / collectives / compute / release, captured on the device ...
//   scope.end();                             // throws unless every lease taken inside was released
//
// While a scope is open the pool
//   - starts from no release events (CUDA forbids waiting inside a capture on an event recorded
//     outside it), and forgets them again when the scope closes (an event recorded inside must
//     not be waited on outside it: the graph carries that order);
//   - refuses, before anything changes, every acquire that would take upstream memory: a unit
//     with buckets outside the arena under NonUnit = dynamic, and an off-trace acquire on an
//     interval plan (under either OffTrace policy). Such a call would allocate (cudaMalloc
//     synchronises: the capture breaks) or hand the graph an address that is not fixed;
//   - refuses a release of a lease acquired before the scope opened (the graph would free a slot
//     it never took; at replay the pool would not know).
// end() checks that every target acquired inside was released inside and that leases held at
// the start are still held, naming each one that is not (logic_error); it closes the scope either
// way. A scope destroyed without end() (an exception left the capture) closes without checking.
// One scope per pool at a time (a second throws logic_error).
//
// Run the step once eagerly before capturing it: strict assignment pins each bucket's group then,
// so the capture takes the same addresses (stats().moves counts any that could not). The CUDA
// stream capture itself is pool/cuda/capture.hpp (graph_capture: this scope plus
// cudaStreamBeginCapture / EndCapture). Replaying the graph uses the slots it captured: launch it
// only where the eager steps would run (ordered on the stream the capture began on).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "headroom/core/error.hpp"
#include "headroom/pool/detail/capture_state.hpp"

namespace headroom::pool {

template <class Pool>
class capture_scope {
 public:
  /// Opens the scope: forgets the pool's release events and remembers what is held. Throws
  /// logic_error when `pool` already has an open scope.
  explicit capture_scope(Pool& pool) : pool_(&pool) {
    expects<logic_error>(pool.capture_ == nullptr, "pool::capture_scope: plan '", pool.plan_.workload_name,
                         "' already has an open capture scope; close it (end()) before opening another");
    auto const n = pool.targets_.size();
    state_.epoch.resize(n);
    state_.holders.resize(n);
    for (std::size_t t = 0; t < n; ++t) {
      state_.epoch[t] = pool.targets_[t].epoch;
      state_.holders[t] = pool.targets_[t].holders;
    }
    pool.clear_release_events();
    pool.capture_ = &state_;
  }
  capture_scope(capture_scope const&) = delete;
  capture_scope& operator=(capture_scope const&) = delete;
  capture_scope(capture_scope&&) = delete;
  capture_scope& operator=(capture_scope&&) = delete;
  /// Closes an open scope without checking (an exception is leaving the capture).
  ~capture_scope() { close(); }

  /// Closes the scope and forgets the release events recorded inside it. Throws logic_error,
  /// after closing, naming every unit (or non-unit bucket) acquired inside and still held, and
  /// every one whose leases from before the scope changed.
  void end() {
    expects<logic_error>(pool_ != nullptr, "pool::capture_scope::end: the scope is closed already");
    Pool& p = *pool_;
    std::ostringstream bad;
    std::size_t count = 0;
    for (std::uint32_t t = 0; t < p.targets_.size(); ++t) {
      auto const& tg = p.targets_[t];
      if (state_.balanced(t, tg.epoch, tg.holders)) continue;
      if (count++ < 8) {
        bad << (count > 1 ? "; " : "") << p.describe_target(t) << " (" << tg.holders << " lease(s) held, "
            << (tg.epoch == state_.epoch[t] ? "held before the scope by " : "acquired inside, so expected ")
            << (tg.epoch == state_.epoch[t] ? state_.holders[t] : 0u) << ")";
      }
    }
    close();
    if (count > 0)
      throw logic_error(headroom::detail::concat("pool::capture_scope::end: plan '", p.plan_.workload_name, "': ",
                                                 count, " target(s) not released as captured: ", bad.str(),
                                                 count > 8 ? "; ..." : "",
                                                 ". A captured step must release every lease it acquires"));
  }
  /// False once end() ran.
  [[nodiscard]] bool open() const noexcept { return pool_ != nullptr; }
  [[nodiscard]] Pool& pool() const noexcept { return *pool_; }

 private:
  void close() noexcept {
    if (pool_ == nullptr) return;
    pool_->capture_ = nullptr;
    pool_->clear_release_events();
    pool_ = nullptr;
  }
  Pool* pool_;
  detail::capture_state state_;
};

template <class Pool>
capture_scope(Pool&) -> capture_scope<Pool>;

}  // namespace headroom::pool
