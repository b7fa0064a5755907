// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Counters {value, peak, total} with nested scopes, after RMM's statistics_resource_adaptor.
//
//   value  what is outstanding now (bytes or allocations); may go negative inside a scope that
//          frees memory allocated before it was pushed
//   peak   the highest value since the scope was pushed or the window was reset
//   total  the sum of everything ever added in the scope (torch's "*.allocated")
//
// scoped_counters<N> keeps N counters per scope on a stack. push() opens a scope with fresh
// counters; pop() folds it into its parent (parent.peak = max(parent.peak, parent.value +
// child.peak)) and returns it, so a scope measures one phase while the outer counters stay
// exact. reset_peaks() starts a new logging window (torch.cuda.reset_peak_memory_stats, the
// per-window peaks torchtitan logs); take_window() reads and resets in one step.
// Every member is safe to call from several threads.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"

namespace headroom::stats {

struct counter {
  std::int64_t value = 0;
  std::int64_t peak = 0;
  std::int64_t total = 0;

  /// Adds n >= 0: value and total grow, peak follows value.
  counter& operator+=(std::int64_t n) {
    expects(n >= 0, "stats::counter: cannot add ", n, ", expected >= 0 (subtract with -=)");
    value += n;
    total += n;
    peak = std::max(peak, value);
    return *this;
  }
  /// Subtracts n >= 0 from value; peak and total are unchanged.
  counter& operator-=(std::int64_t n) {
    expects(n >= 0, "stats::counter: cannot subtract ", n, ", expected >= 0 (add with +=)");
    value -= n;
    return *this;
  }
  /// Folds a child scope that ran on top of this one.
  void absorb(counter const& child) noexcept {
    peak = std::max(peak, value + child.peak);
    value += child.value;
    total += child.total;
  }
  /// Starts a new window: the peak becomes the current value.
  void reset_peak() noexcept { peak = value; }

  friend bool operator==(counter const&, counter const&) = default;
  friend std::ostream& operator<<(std::ostream& os, counter const& c) {
    return os << "{value " << c.value << ", peak " << c.peak << ", total " << c.total << "}";
  }
};

/// N counters per scope, on a stack of scopes. Index i names what counter i counts (the
/// statistics adaptor uses 0 = bytes, 1 = allocations).
template <std::size_t N>
class scoped_counters {
  static_assert(N > 0, "scoped_counters needs at least one counter");

 public:
  using snapshot = std::array<counter, N>;

  scoped_counters() : stack_(1) {}

  /// Adds n to counter i of the innermost scope.
  void add(std::size_t i, std::int64_t n) {
    check_index(i);
    std::unique_lock lock(mutex_);
    stack_.back()[i] += n;
  }
  /// Subtracts n from counter i of the innermost scope.
  void sub(std::size_t i, std::int64_t n) {
    check_index(i);
    std::unique_lock lock(mutex_);
    stack_.back()[i] -= n;
  }
  /// Adds to every counter at once (one lock), e.g. {bytes, 1} per allocation.
  void add(std::array<std::int64_t, N> const& n) {
    std::unique_lock lock(mutex_);
    auto updated = stack_.back();
    for (std::size_t i = 0; i < N; ++i) updated[i] += n[i];  // may throw before anything changed
    stack_.back() = updated;
  }
  void sub(std::array<std::int64_t, N> const& n) {
    std::unique_lock lock(mutex_);
    auto updated = stack_.back();
    for (std::size_t i = 0; i < N; ++i) updated[i] -= n[i];
    stack_.back() = updated;
  }

  /// The innermost scope's counters.
  [[nodiscard]] snapshot current() const {
    std::shared_lock lock(mutex_);
    return stack_.back();
  }
  [[nodiscard]] counter current(std::size_t i) const {
    check_index(i);
    std::shared_lock lock(mutex_);
    return stack_.back()[i];
  }
  /// Number of scopes, 1 when none was pushed.
  [[nodiscard]] std::size_t depth() const {
    std::shared_lock lock(mutex_);
    return stack_.size();
  }

  /// Opens a scope with zeroed counters.
  void push() {
    std::unique_lock lock(mutex_);
    stack_.emplace_back();
  }
  /// Closes the innermost scope, folds it into its parent and returns it. Throws logic_error
  /// when only the outermost scope is left.
  snapshot pop() {
    std::unique_lock lock(mutex_);
    expects<logic_error>(stack_.size() > 1, "stats::scoped_counters::pop: no scope was pushed (depth 1)");
    snapshot const child = stack_.back();
    stack_.pop_back();
    for (std::size_t i = 0; i < N; ++i) stack_.back()[i].absorb(child[i]);
    return child;
  }

  /// Starts a new logging window in every scope: peak = value.
  void reset_peaks() {
    std::unique_lock lock(mutex_);
    for (auto& level : stack_)
      for (auto& c : level) c.reset_peak();
  }
  /// Returns the innermost scope's counters and starts a new window, atomically (no update
  /// between the read and the reset is lost from the next window's peak).
  snapshot take_window() {
    std::unique_lock lock(mutex_);
    snapshot const s = stack_.back();
    for (auto& level : stack_)
      for (auto& c : level) c.reset_peak();
    return s;
  }

 private:
  static void check_index(std::size_t i) {
    expects(i < N, "stats::scoped_counters: counter index ", i, " out of range [0, ", N, ")");
  }

  mutable std::shared_mutex mutex_;
  std::vector<snapshot> stack_;
};

/// RAII scope: pushes on construction, pops on destruction (or earlier with close()).
template <std::size_t N>
class counter_scope {
 public:
  explicit counter_scope(scoped_counters<N>& counters) : counters_(&counters) { counters_->push(); }
  counter_scope(counter_scope const&) = delete;
  counter_scope& operator=(counter_scope const&) = delete;
  ~counter_scope() {
    if (counters_ == nullptr) return;
    try {
      static_cast<void>(counters_->pop());
    } catch (logic_error const&) {
      // Someone popped this scope by hand; there is nothing left to fold, and a destructor must not throw.
    }
  }
  /// Pops now and returns the scope's counters; the destructor then does nothing.
  typename scoped_counters<N>::snapshot close() {
    expects<logic_error>(counters_ != nullptr, "stats::counter_scope::close: scope already closed");
    auto* c = std::exchange(counters_, nullptr);
    return c->pop();
  }

 private:
  scoped_counters<N>* counters_;
};

}  // namespace headroom::stats
