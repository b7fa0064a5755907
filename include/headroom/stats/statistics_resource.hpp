// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// statistics_resource<Upstream>: wraps any headroom stream_resource (host aligned_resource,
// cuda::device_resource, cuda::async_resource, a pool) and counts what passes through it:
// bytes and allocations, each {value, peak, total}, with nested scopes and per-window peaks
// (see counter.hpp), plus failed allocations. Counts use the requested bytes, as RMM does.
//
// Copies share one set of counters (and compare equal), so the adaptor can be passed by value
// like any resource. Properties (host_accessible, device_accessible) are those of Upstream.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "headroom/core/bytes.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/core/stream.hpp"
#include "headroom/stats/counter.hpp"
#include "headroom/stats/keys.hpp"

namespace headroom::stats {

template <class Upstream>
class statistics_resource {
 public:
  static constexpr std::size_t bytes_counter = 0;
  static constexpr std::size_t allocations_counter = 1;

  explicit statistics_resource(Upstream upstream = Upstream{})
      : upstream_(std::move(upstream)), state_(std::make_shared<state>()) {}

  /// Allocates from upstream and counts the request. An upstream failure is counted in
  /// num_ooms and rethrown unchanged.
  template <stream S>
    requires stream_resource<Upstream, S>
  [[nodiscard]] void* allocate(S const& s, std::size_t bytes, std::size_t alignment = default_alignment) {
    expects(bytes <= static_cast<std::size_t>(INT64_MAX), "stats::statistics_resource::allocate: ", bytes,
            " bytes exceed what an int64 counter holds");
    void* p = nullptr;
    try {
      p = upstream_.allocate(s, bytes, alignment);
    } catch (...) {
      state_->failures.fetch_add(1, std::memory_order_relaxed);
      throw;
    }
    state_->counters.add({static_cast<std::int64_t>(bytes), 1});
    return p;
  }

  /// Returns the block to upstream in stream order (Upstream's contract) and uncounts it.
  template <stream S>
    requires stream_resource<Upstream, S>
  void deallocate(S const& s, void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    upstream_.deallocate(s, p, bytes, alignment);
    try {
      state_->counters.sub({static_cast<std::int64_t>(bytes), 1});
    } catch (...) {
      // sub only throws for negative amounts, which a size_t below INT64_MAX never gives.
    }
  }

  /// Counters of the innermost scope: [bytes_counter], [allocations_counter].
  [[nodiscard]] typename scoped_counters<2>::snapshot counters() const { return state_->counters.current(); }
  [[nodiscard]] counter bytes() const { return state_->counters.current(bytes_counter); }
  [[nodiscard]] counter allocations() const { return state_->counters.current(allocations_counter); }
  [[nodiscard]] std::int64_t failed_allocations() const noexcept {
    return state_->failures.load(std::memory_order_relaxed);
  }

  /// Opens a scope (RMM push_counters); pop_scope folds it into the parent and returns it.
  void push_scope() { state_->counters.push(); }
  typename scoped_counters<2>::snapshot pop_scope() { return state_->counters.pop(); }
  [[nodiscard]] counter_scope<2> scope() { return counter_scope<2>(state_->counters); }
  [[nodiscard]] std::size_t scope_depth() const { return state_->counters.depth(); }

  /// New logging window: every peak becomes the current value.
  void reset_peaks() { state_->counters.reset_peaks(); }

  /// The innermost scope as torch.cuda.memory_stats() keys.
  [[nodiscard]] allocator_report report() const { return to_report(state_->counters.current()); }
  /// report(), then a new window (peaks reset), atomically.
  [[nodiscard]] allocator_report take_window() { return to_report(state_->counters.take_window()); }

  [[nodiscard]] Upstream const& upstream() const noexcept { return upstream_; }

  friend bool operator==(statistics_resource const& a, statistics_resource const& b) noexcept {
    return a.state_ == b.state_;
  }
  template <class P>
    requires has_property<Upstream, P>
  friend void get_property(statistics_resource const&, P) noexcept {}

 private:
  struct state {
    scoped_counters<2> counters;
    std::atomic<std::int64_t> failures{0};
  };

  [[nodiscard]] allocator_report to_report(typename scoped_counters<2>::snapshot const& c) const {
    auto const& b = c[bytes_counter];
    auto const& n = c[allocations_counter];
    // freed = allocated - current: torch's "historical decreases".
    return allocator_report(b.value, b.peak, b.total, b.total - b.value, n.value, n.peak, n.total, n.total - n.value,
                            failed_allocations());
  }

  Upstream upstream_;
  std::shared_ptr<state> state_;
};

}  // namespace headroom::stats
