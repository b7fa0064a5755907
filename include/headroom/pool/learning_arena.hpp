// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// learning_arena: the bookkeeping of an adapter that serves buckets from one planned arena at
// fixed offsets, after learning their lifetimes from the first step. No memory: the caller owns
// the arena and its caching allocator; this says which offset to use.
//
//   pool::learning_arena a({.planner = "interval"});
//   a.declare({.id = 0, .unit = 0, .group = 0, .dtype = "bfloat16", .bytes = 4096});
//   a.acquire(0, 4352);   // step 0: nothing (serve it yourself); the lease is recorded
//   a.release(0);
//   a.end_step();         // plans; true: arena_bytes() changed, (re)allocate the arena
//   a.acquire(0, 4352);   // now the planned offset, or nothing (counted fallback, see below)
//
// Step 0 is learned: acquire returns no offset while the lease trace records it. end_step()
// plans the trace (plan_lifetimes with the planner and follow_moves: interval = the best
// candidate, never larger than max; max / by_bytes = that replay) and returns whether the arena
// size changed. Nothing is live at a step boundary.
// Afterwards acquire returns the planned offset, or no offset when the request is not in the plan,
// counted by reason: unknown_bucket (the trace never acquired it), larger_than_planned, or
// overlaps_live (its planned bytes meet a lease held now: the order differs from the trace's).
// A max / by_bytes winner first tries the bucket's slot in the other buffer groups, as Megatron's
// MaxPool does when a pinned slot is busy (lifetime_plan::alternatives).
// Every step is kept in the trace once: at its end_step() a step whose events (acquires with
// their bytes, releases, in order) differ from every kept step's is appended; a repeat of a kept
// step is not (compared event by event, found by an FNV-1a hash of its events). So the trace
// holds the distinct steps seen, in first-seen order, at most max_events events in all, and
// replan() at a later step boundary plans them all: afterwards a step that repeats any step seen
// so far gets an offset for every pooled request (no fallback). A packing is feasible on every
// kept step; at a max / by_bytes winner the run time follows the replay's slot moves (exactly
// when each bucket's largest request was made at its pinned slot, as when it asks the same bytes
// every time; otherwise a request may fall back, never overlap).
// Buckets outside every unit are never planned (counted as unpooled). A step that would take the
// trace beyond max_events throws capacity_error naming the cap (the arena keeps its plan; the
// step is not recorded, and may fall back after a replan).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool/lease_trace.hpp"
#include "headroom/pool/lifetime_plan.hpp"

namespace headroom::pool {

enum class fallback_reason : std::uint8_t { unknown_bucket, larger_than_planned, overlaps_live };
inline constexpr std::array<std::string_view, 3> fallback_reason_names{"unknown_bucket", "larger_than_planned",
                                                                      "overlaps_live"};

struct learning_arena_options {
  std::string planner = "interval";  ///< interval, max or by_bytes
  std::size_t alignment = default_alignment;
  std::size_t max_events = std::size_t{1} << 22;  ///< cap on recorded trace events
};

struct learning_arena_stats {
  std::string planner;
  bool learning = true;            ///< no plan yet (before the first end_step)
  std::string winner;              ///< the plan's winning candidate ("" while learning)
  std::uint64_t arena_bytes = 0;
  std::uint64_t bound = 0;
  std::uint64_t megatron_max_bytes = 0;  ///< what Megatron's MaxPool holds on the recorded trace
  std::size_t steps = 0;           ///< step boundaries seen
  std::size_t recorded_steps = 0;  ///< steps in the trace: the distinct steps seen
  std::size_t events = 0;          ///< events in the trace
  std::size_t max_events = 0;
  std::size_t acquires = 0;        ///< after learning
  std::size_t served = 0;          ///< acquires given an offset
  std::array<std::size_t, 3> fallbacks{};  ///< by fallback_reason
  std::size_t unpooled = 0;        ///< acquires of buckets outside every unit
  std::size_t replans = 0;
};

class learning_arena {
 public:
  /// Throws invalid_argument for an unknown planner, an alignment that is not a power of two or
  /// max_events = 0.
  explicit learning_arena(learning_arena_options options = {}) : options_(std::move(options)) {
    expects(std::find(std::begin(lifetime_planners), std::end(lifetime_planners), options_.planner) !=
                std::end(lifetime_planners),
            "pool::learning_arena: planner '", options_.planner, "'; expected interval, max or by_bytes");
    expects(is_power_of_two(options_.alignment), "pool::learning_arena: alignment ", options_.alignment,
            " is not a power of two");
    expects(options_.max_events > 0, "pool::learning_arena: max_events = 0; expected at least 1");
  }

  /// See lease_trace::declare; a bucket may be declared at any time before its first acquire.
  void declare(trace_bucket b) { trace_.declare(std::move(b)); }

  /// The offset to serve `bucket` at, or nothing (serve it from the caching allocator). Throws
  /// invalid_argument for an undeclared bucket or bytes outside 1 .. 2^62, logic_error when the
  /// bucket is held, capacity_error when the step would exceed max_events.
  /// keep_place: every lease of the bucket within one step is served where its first lease of the
  /// step was (for a caller that keeps views of that lease, as autograd keeps a weight bucket's
  /// forward lease for the backward): at that range again, by the caching allocator again when the
  /// first fell back (counted under the first one's reason), and capacity_error, recording nothing,
  /// when another lease holds that range now or the request is larger than it.
  [[nodiscard]] std::optional<std::uint64_t> acquire(std::uint64_t bucket, std::uint64_t bytes,
                                                     bool keep_place = false) {
    if (!plan_) {
      check_cap();
      trace_.acquire(bucket, bytes);
      return std::nullopt;
    }
    auto const* b = trace_.find(bucket);
    expects(b != nullptr, "pool::learning_arena: acquire of bucket ", bucket, ", which was never declared");
    expects(bytes > 0 && bytes <= max_workload_bytes, "pool::learning_arena: acquire of bucket ", bucket, " for ",
            bytes, " bytes; expected 1 .. 2^62");
    expects<logic_error>(!live_.contains(bucket), "pool::learning_arena: acquire of bucket ", bucket,
                         ", which is held (acquired and not released)");
    auto const first = first_in_step_.find(bucket);
    bool const kept = keep_place && first != first_in_step_.end() && first->second.step == stats_.steps;
    if (kept && first->second.range.second > 0) {
      auto const [begin, end] = first->second.range;
      auto const holder = meeting(live_, begin, end);
      expects<capacity_error>(!holder && bytes <= end - begin, "pool::learning_arena: bucket ", bucket, " of unit ",
                              b->unit, " was served at arena offset ", begin, " earlier in this step (the caller keeps "
                              "views of it) and ", holder ? "bucket " + std::to_string(*holder) + " holds those bytes now"
                              : std::to_string(bytes) + " bytes do not fit there now",
                              ", in an order the recorded steps did not show; replan() at a step boundary after a "
                              "step in that order");
    }
    check_cap();
    step_.push_back({lease_event_kind::acquire, bucket, bytes});
    ++stats_.acquires;
    std::pair<std::uint64_t, std::uint64_t> range{0, 0};  // in the arena; fallbacks take none
    std::optional<fallback_reason> why;
    if (b->unit == no_trace_unit) {
      ++stats_.unpooled;
    } else if (kept) {
      range = first->second.range;
      why = first->second.why;
    } else if (!plan_->offsets.contains(bucket)) {
      why = fallback_reason::unknown_bucket;
    } else if (bytes > plan_->bytes.at(bucket)) {
      why = fallback_reason::larger_than_planned;
    } else if (auto const r = free_range(live_, bucket, bytes)) {
      range = *r;
    } else {
      why = fallback_reason::overlaps_live;
    }
    if (why) fall_back(*why);
    if (range.second > 0) ++stats_.served;
    if (b->unit != no_trace_unit && (first == first_in_step_.end() || first->second.step != stats_.steps))
      first_in_step_[bucket] = {stats_.steps, range, why};
    live_.emplace(bucket, range);
    return range.second > 0 ? std::optional<std::uint64_t>(range.first) : std::nullopt;
  }

  /// Whether acquiring each of `buckets` now, in order, would find room in the arena, counting the
  /// leases of `releasable` as released (Megatron-FSDP's capacity question): false when one would
  /// fall back as overlaps_live. Held buckets count as held; buckets the plan does not hold
  /// (outside every unit, never acquired in the trace) do not count (the caller serves them), nor
  /// does anything while learning. Throws invalid_argument for an undeclared bucket.
  [[nodiscard]] bool can_acquire(std::span<std::uint64_t const> buckets,
                                 std::span<std::uint64_t const> releasable = {}) const {
    for (auto const* list : {&buckets, &releasable})
      for (auto const id : *list)
        expects(trace_.find(id) != nullptr, "pool::learning_arena: can_acquire of bucket ", id,
                ", which was never declared");
    if (!plan_) return true;
    auto live = live_;
    for (auto const id : releasable) live.erase(id);
    for (auto const id : buckets) {
      if (live.contains(id) || !plan_->offsets.contains(id)) continue;
      auto const r = free_range(live, id, plan_->bytes.at(id));
      if (!r) return false;
      live.emplace(id, *r);
    }
    return true;
  }

  /// Throws logic_error when the bucket is not held (invalid_argument when never declared).
  void release(std::uint64_t bucket) {
    if (!plan_) {
      check_cap();
      trace_.release(bucket);
      return;
    }
    expects(trace_.find(bucket) != nullptr, "pool::learning_arena: release of bucket ", bucket,
            ", which was never declared");
    expects<logic_error>(live_.contains(bucket), "pool::learning_arena: release of bucket ", bucket,
                         ", which is not held");
    check_cap();
    live_.erase(bucket);
    step_.push_back({lease_event_kind::release, bucket, 0});
  }

  /// A step boundary (nothing held). The first plans the learned step; true when arena_bytes()
  /// changed. Later ones keep a step not seen before in the trace; they return false.
  bool end_step() {
    std::size_t const held = plan_ ? live_.size() : trace_.held().size();
    expects<logic_error>(held == 0, "pool::learning_arena: end_step() with ", held,
                         " bucket(s) held; expected every bucket released at a step boundary");
    ++stats_.steps;
    if (!plan_) {
      check_cap();
      trace_.end_step();
      auto const& ev = trace_.events();
      kept_.emplace(hash_of(std::span(ev.data(), ev.size() - 1)), 0);
      return lay_out();
    }
    std::vector<lease_event> step = std::move(step_);
    step_.clear();
    std::uint64_t const hash = hash_of(step);
    if (kept(step, hash)) return false;
    expects<capacity_error>(trace_.events().size() + step.size() + 1 <= options_.max_events,
                            "pool::learning_arena: keeping step ", stats_.steps - 1, " (", step.size() + 1,
                            " events, a step not seen before) would take the trace beyond max_events = ",
                            options_.max_events, " (it holds ", trace_.events().size(),
                            "); raise max_events");
    std::size_t const begin = trace_.events().size();
    for (auto const& e : step) trace_.record(e);
    trace_.end_step();
    kept_.emplace(hash, begin);
    return false;
  }

  /// At a step boundary after the first end_step(): plans every kept (distinct) step; true when
  /// arena_bytes() changed. Throws logic_error before the first end_step() or within a step.
  bool replan() {
    expects<logic_error>(plan_.has_value(), "pool::learning_arena: replan() before the first end_step(); the "
                                            "first step is still being learned");
    expects<logic_error>(step_.empty() && live_.empty(), "pool::learning_arena: replan() within a step (",
                         step_.size(), " events since the last end_step()); call it at a step boundary");
    ++stats_.replans;
    return lay_out();
  }

  [[nodiscard]] bool learning() const noexcept { return !plan_; }
  [[nodiscard]] std::optional<lifetime_plan> const& plan() const noexcept { return plan_; }
  [[nodiscard]] lease_trace const& trace() const noexcept { return trace_; }
  [[nodiscard]] std::uint64_t arena_bytes() const noexcept { return plan_ ? plan_->arena_bytes : 0; }
  [[nodiscard]] learning_arena_options const& options() const noexcept { return options_; }

  [[nodiscard]] learning_arena_stats stats() const {
    learning_arena_stats s = stats_;
    s.planner = options_.planner;
    s.learning = !plan_;
    s.winner = plan_ ? plan_->winner : std::string();
    s.arena_bytes = arena_bytes();
    s.bound = plan_ ? plan_->bound : 0;
    s.megatron_max_bytes = megatron_max_bytes_;
    s.recorded_steps = trace_.steps();
    s.events = trace_.events().size();
    s.max_events = options_.max_events;
    return s;
  }

 private:
  // Learning: the trace; afterwards: the current step's events (kept when not seen before).
  void check_cap() const {
    std::size_t const have = plan_ ? step_.size() : trace_.events().size();
    std::size_t const more = 1;
    expects<capacity_error>(more <= options_.max_events && have <= options_.max_events - more,
                            "pool::learning_arena: recording ", more, " more event(s) after ", have,
                            " would exceed max_events = ", options_.max_events,
                            "; raise max_events or end the step sooner");
  }
  void fall_back(fallback_reason r) { ++stats_.fallbacks[static_cast<std::size_t>(r)]; }
  static std::uint64_t hash_of(std::span<lease_event const> step) noexcept {
    detail::fnv1a64 h;
    h.add(step.size());
    for (auto const& e : step) {
      h.add(static_cast<std::uint64_t>(e.kind));
      h.add(e.bucket);
      h.add(e.bytes);
    }
    return h.value();
  }
  // Whether `step` (its events, without the boundary) equals a kept step.
  bool kept(std::vector<lease_event> const& step, std::uint64_t hash) const {
    auto const& ev = trace_.events();
    auto const [first, last] = kept_.equal_range(hash);
    for (auto it = first; it != last; ++it) {
      std::size_t const begin = it->second;
      if (begin + step.size() < ev.size() && ev[begin + step.size()].kind == lease_event_kind::step &&
          std::equal(step.begin(), step.end(), ev.begin() + static_cast<std::ptrdiff_t>(begin)))
        return true;
    }
    return false;
  }
  bool lay_out() {
    std::uint64_t const before = arena_bytes();
    bool const first = !plan_;
    plan_ = plan_lifetimes(trace_, {.alignment = options_.alignment, .planner = options_.planner, .follow_moves = true});
    megatron_max_bytes_ = detail::replay_maxpool(trace_, false, options_.alignment).arena;
    return first ? plan_->arena_bytes != 0 || before != 0 : plan_->arena_bytes != before;
  }

  using live_map = std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>>;
  // The live lease whose range meets [begin, end), if any.
  static std::optional<std::uint64_t> meeting(live_map const& live, std::uint64_t begin, std::uint64_t end) {
    for (auto const& [other, r] : live)
      if (r.first < end && begin < r.second) return other;
    return std::nullopt;
  }
  // Where a planned bucket would be served now: its planned range, else (max / by_bytes) its slot
  // in the other buffer groups, the first free one of `bytes` or more; nothing when all are taken.
  std::optional<std::pair<std::uint64_t, std::uint64_t>> free_range(live_map const& live, std::uint64_t bucket,
                                                                    std::uint64_t bytes) const {
    std::uint64_t const begin = plan_->offsets.at(bucket);
    std::uint64_t const end = begin + align_up(plan_->bytes.at(bucket), options_.alignment);
    if (!meeting(live, begin, end)) return std::pair{begin, end};
    if (auto const alt = plan_->alternatives.find(bucket); alt != plan_->alternatives.end())
      for (auto const& [o, n] : alt->second)
        if (n >= bytes && !meeting(live, o, o + n)) return std::pair{o, o + n};
    return std::nullopt;
  }
  struct first_lease {
    std::size_t step = 0;                             // stats_.steps when it was made
    std::pair<std::uint64_t, std::uint64_t> range;  // {0, 0}: it fell back
    std::optional<fallback_reason> why;             // why it fell back
  };

  learning_arena_options options_;
  lease_trace trace_;
  std::optional<lifetime_plan> plan_;
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> live_;  // bucket -> [begin, end) or {0, 0}
  std::vector<lease_event> step_;  // events of the current step (after learning)
  std::multimap<std::uint64_t, std::size_t> kept_;  // hash of a kept step's events -> its first event

  std::uint64_t megatron_max_bytes_ = 0;
  learning_arena_stats stats_;
  std::map<std::uint64_t, first_lease> first_in_step_;  // bucket -> its first lease of the step (keep_place)
};

}  // namespace headroom::pool
