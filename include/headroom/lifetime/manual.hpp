// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// A manually advanced substrate: streams whose work completes only when a test says so, events
// over them, and a stream-ordered host resource modelled on cudaMemPool_t. It makes the
// ordering that lifetime policies promise observable on a CPU: "the reader on the comm stream
// ran before the owner stream overwrote the block", "the host never blocked", "the quarantine
// grew while the device lagged".
//
//   manual::timeline t;
//   auto compute = t.make_stream("compute"), comm = t.make_stream("comm");
//   t.submit(comm, [&] { seen = *p; });   // work: runs when comm reaches it
//   t.run_all();                          // advance every stream as far as waits allow
//
// A stream is a queue of operations: work (a callback run when the operation completes) and
// waits (on an event: the stream cannot pass it until the event's stream has reached the mark).
// Operations complete only through step()/run()/run_all(), or when the host synchronizes (an
// event or a stream), which is counted in host_waits(). A destroyed stream accepts no more
// operations (logic_error), but what it already holds can still complete, as in CUDA.
//
// Single-threaded: one timeline belongs to one test thread.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/event.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/core/stream.hpp"
#include "headroom/lifetime/guard.hpp"

namespace headroom::lifetime::manual {

class timeline;

/// A view of one queue of a timeline. Default-constructed: no timeline (any use throws).
class stream {
 public:
  stream() noexcept = default;
  stream(timeline* t, std::size_t id) noexcept : timeline_(t), id_(id) {}

  void synchronize() const;  // host waits for everything issued so far (counted)
  [[nodiscard]] timeline* owner() const noexcept { return timeline_; }
  [[nodiscard]] std::size_t id() const noexcept { return id_; }
  friend bool operator==(stream const&, stream const&) noexcept = default;

 private:
  timeline* timeline_ = nullptr;
  std::size_t id_ = 0;
};
static_assert(headroom::stream<stream>);

class timeline {
 public:
  timeline() = default;
  timeline(timeline const&) = delete;
  timeline& operator=(timeline const&) = delete;

  [[nodiscard]] stream make_stream(std::string name) {
    queues_.push_back(queue{std::move(name), {}, 0, false});
    return stream(this, queues_.size() - 1);
  }
  /// Accepts no more operations on `s`; operations already queued still complete.
  void destroy(stream s) { at(s, "destroy").destroyed = true; }
  [[nodiscard]] bool destroyed(stream s) const { return at(s, "destroyed").destroyed; }
  [[nodiscard]] std::string const& name(stream s) const { return at(s, "name").name; }

  /// Enqueues work that runs when `s` reaches it.
  void submit(stream s, std::function<void()> work) { push(s, op{std::move(work), false, 0, 0}, "submit"); }
  /// Enqueues a wait: `s` cannot pass it until stream `target` completed `count` operations.
  void enqueue_wait(stream s, std::size_t target, std::size_t count) {
    expects(target < queues_.size(), "manual::timeline: wait on stream id ", target, ", expected < ",
            queues_.size());
    push(s, op{{}, true, target, count}, "wait");
  }

  [[nodiscard]] std::size_t issued(stream s) const { return at(s, "issued").ops.size(); }
  [[nodiscard]] std::size_t completed(stream s) const { return at(s, "completed").done; }
  [[nodiscard]] std::size_t completed(std::size_t id) const { return id < queues_.size() ? queues_[id].done : 0; }
  [[nodiscard]] std::size_t pending(stream s) const { return issued(s) - completed(s); }
  /// How many times the host blocked on an event or a stream.
  [[nodiscard]] std::size_t host_waits() const noexcept { return host_waits_; }

  /// Completes the next operation of `s` if it can (a wait whose mark is not reached blocks).
  bool step(stream s) {
    auto& q = at(s, "step");
    if (q.done == q.ops.size()) return false;
    op& o = q.ops[q.done];
    if (o.is_wait && queues_[o.target].done < o.count) return false;
    complete_next(s.id());
    return true;
  }
  /// Steps `s` until it is empty or blocked; returns the operations completed.
  std::size_t run(stream s) {
    std::size_t n = 0;
    while (step(s)) ++n;
    return n;
  }
  /// Advances every stream, in creation order, until none can move. Returns operations completed.
  std::size_t run_all() {
    std::size_t total = 0;
    for (bool progress = true; progress;) {
      progress = false;
      for (std::size_t id = 0; id < queues_.size(); ++id) {
        std::size_t const n = run(stream(this, id));
        total += n;
        progress = progress || n > 0;
      }
    }
    return total;
  }

  /// The host waits until stream `id` completed `count` operations (forcing what they wait on).
  void host_wait(std::size_t id, std::size_t count) {
    expects(id < queues_.size(), "manual::timeline: host wait on stream id ", id, ", expected < ", queues_.size());
    ++host_waits_;
    complete_until(id, count);
  }

 private:
  struct op {
    std::function<void()> work;
    bool is_wait = false;
    std::size_t target = 0;
    std::size_t count = 0;
  };
  struct queue {
    std::string name;
    std::vector<op> ops;
    std::size_t done = 0;
    bool destroyed = false;
  };

  queue& at(stream s, char const* what) {
    expects<logic_error>(s.owner() == this && s.id() < queues_.size(), "manual::timeline::", what,
                         ": the stream does not belong to this timeline");
    return queues_[s.id()];
  }
  queue const& at(stream s, char const* what) const {
    expects<logic_error>(s.owner() == this && s.id() < queues_.size(), "manual::timeline::", what,
                         ": the stream does not belong to this timeline");
    return queues_[s.id()];
  }
  void push(stream s, op o, char const* what) {
    auto& q = at(s, what);
    expects<logic_error>(!q.destroyed, "manual::timeline::", what, ": stream '", q.name,
                         "' was destroyed; a stream accepts no work after that");
    q.ops.push_back(std::move(o));
  }
  void complete_next(std::size_t id) {
    // Move the callback out first: it may enqueue work, which can reallocate the vector.
    auto work = std::move(queues_[id].ops[queues_[id].done].work);
    ++queues_[id].done;
    if (work) work();
  }
  // Waits only point at marks recorded before they were enqueued, so this cannot cycle.
  void complete_until(std::size_t id, std::size_t count) {
    count = std::min(count, queues_[id].ops.size());
    while (queues_[id].done < count) {
      op const& o = queues_[id].ops[queues_[id].done];
      if (o.is_wait) complete_until(o.target, o.count);
      complete_next(id);
    }
  }

  std::vector<queue> queues_;
  std::size_t host_waits_ = 0;
};

inline void stream::synchronize() const {
  expects<logic_error>(timeline_ != nullptr, "manual::stream::synchronize on a stream of no timeline");
  timeline_->host_wait(id_, timeline_->issued(*this));
}

/// Marks a point of a manual stream. Never recorded: ready, and waiting on it is a no-op.
class event {
 public:
  void record(stream const& s) {
    expects<logic_error>(s.owner() != nullptr, "manual::event::record on a stream of no timeline");
    timeline_ = s.owner();
    stream_ = s.id();
    mark_ = timeline_->issued(s);
  }
  [[nodiscard]] bool ready() const { return timeline_ == nullptr || timeline_->completed(stream_) >= mark_; }
  void wait_on(stream const& s) const {
    if (timeline_ == nullptr) return;
    expects<logic_error>(s.owner() == timeline_, "manual::event::wait_on: the stream belongs to another timeline");
    timeline_->enqueue_wait(s, stream_, mark_);
  }
  void synchronize() const {
    if (timeline_ != nullptr) timeline_->host_wait(stream_, mark_);
  }
  [[nodiscard]] bool recorded() const noexcept { return timeline_ != nullptr; }

 private:
  timeline* timeline_ = nullptr;
  std::size_t stream_ = 0;
  std::size_t mark_ = 0;
};
static_assert(headroom::event<event, stream>);

/// Counters of a manual::resource, named as cudaMemPool_t's attributes.
struct pool_usage {
  std::size_t used_current = 0;
  std::size_t used_high = 0;
  std::size_t reserved_current = 0;
  std::size_t reserved_high = 0;
};

/// Host memory with cudaMemPool_t's reuse rules, over a manual timeline:
///  - a block freed on stream s can be reused at once by an allocation on s (stream order);
///  - a block whose free has completed can be reused by any stream;
///  - otherwise the pool reserves a new block.
/// Blocks are reused only for requests of the same size and alignment (enough to observe
/// reuse), most recently freed first. Memory is real (tests read and write it) and is returned
/// to the system only when the resource is destroyed, so a block a guard leaked is no leak here.
class resource {
 public:
  explicit resource(timeline& t) : timeline_(&t) {}
  resource(resource const&) = delete;
  resource& operator=(resource const&) = delete;
  ~resource() {
    for (auto& b : blocks_) ::operator delete(b.pointer, std::align_val_t{b.alignment});
  }

  [[nodiscard]] void* allocate(stream const& s, std::size_t bytes, std::size_t alignment = default_alignment) {
    expects(is_power_of_two(alignment), "manual::resource::allocate: alignment ", alignment,
            " is not a power of two");
    expects<logic_error>(s.owner() == timeline_, "manual::resource::allocate: the stream belongs to another timeline");
    expects<logic_error>(!timeline_->destroyed(s), "manual::resource::allocate: stream '", timeline_->name(s),
                         "' was destroyed");
    std::size_t const size = bytes == 0 ? 1 : bytes;
    entry* pick = nullptr;
    for (auto it = blocks_.rbegin(); it != blocks_.rend() && pick == nullptr; ++it)
      if (it->status == state::free && it->bytes == size && it->alignment == alignment && it->free_stream == s.id())
        pick = &*it;
    for (auto it = blocks_.rbegin(); it != blocks_.rend() && pick == nullptr; ++it)
      if (it->status == state::free && it->bytes == size && it->alignment == alignment &&
          timeline_->completed(it->free_stream) >= it->free_mark)
        pick = &*it;
    if (pick == nullptr) {
      blocks_.push_back({::operator new(size, std::align_val_t{alignment}), size, alignment, state::in_use, 0, 0});
      pick = &blocks_.back();
      usage_.reserved_current += size;
      usage_.reserved_high = std::max(usage_.reserved_high, usage_.reserved_current);
    }
    pick->status = state::in_use;
    usage_.used_current += size;
    usage_.used_high = std::max(usage_.used_high, usage_.used_current);
    return pick->pointer;
  }

  /// Frees in stream order on `s`. On a destroyed stream, or for a pointer this resource did not
  /// hand out, the free is refused and counted (the block stays in use): a noexcept function
  /// cannot throw, and CUDA reports such calls the same way.
  void deallocate(stream const& s, void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    std::size_t const size = bytes == 0 ? 1 : bytes;
    auto it = std::find_if(blocks_.begin(), blocks_.end(), [&](entry const& e) { return e.pointer == p; });
    if (it == blocks_.end() || it->status != state::in_use || it->bytes != size || it->alignment != alignment ||
        s.owner() != timeline_ || timeline_->destroyed(s)) {
      ++refused_frees_;
      return;
    }
    it->status = state::free;
    it->free_stream = s.id();
    it->free_mark = timeline_->issued(s) + 1;
    try {
      timeline_->submit(s, {});  // the free itself, as an operation of s
    } catch (...) {
      ++refused_frees_;  // unreachable: the stream was checked above
    }
    usage_.used_current -= size;
  }

  [[nodiscard]] pool_usage usage() const noexcept { return usage_; }
  /// Frees refused because the stream was destroyed or the block unknown or not in use.
  [[nodiscard]] std::size_t refused_frees() const noexcept { return refused_frees_; }
  /// Whether `p` is a block of this resource that is currently allocated.
  [[nodiscard]] bool in_use(void const* p) const noexcept {
    return std::any_of(blocks_.begin(), blocks_.end(),
                       [&](entry const& e) { return e.pointer == p && e.status == state::in_use; });
  }

  friend bool operator==(resource const& a, resource const& b) noexcept { return &a == &b; }
  friend void get_property(resource const&, host_accessible) noexcept {}

 private:
  enum class state : std::uint8_t { in_use, free };
  struct entry {
    void* pointer;
    std::size_t bytes;
    std::size_t alignment;
    state status;
    std::size_t free_stream;
    std::size_t free_mark;  // the free completed once free_stream completed this many operations
  };

  timeline* timeline_;
  std::vector<entry> blocks_;
  pool_usage usage_{};
  std::size_t refused_frees_ = 0;
};
static_assert(stream_resource_with<resource, stream, host_accessible>);

}  // namespace headroom::lifetime::manual

namespace headroom::lifetime {
template <>
struct event_type_for<manual::stream> {
  using type = manual::event;
};
}  // namespace headroom::lifetime
