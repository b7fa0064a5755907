// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// thread_group: N ranks as threads of one process, with real collective and point-to-point
// semantics over host memory. The embedded default engine for tests, demos and CPU-only CI.
//
// Every collective is a two-phase rendezvous: each rank publishes a descriptor (kind, element
// type, sizes, op, root) and its input pointer, then all ranks check that the descriptors
// agree. A disagreement raises `collective_mismatch` on every rank, never a hang. Results are
// reduced in rank order, so every rank gets bitwise identical values.
//
// A rank that fails outside a collective aborts the group through `launch` (or `abort`);
// ranks waiting in a collective then get `group_aborted`.
#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/host/stream.hpp"

namespace headroom::host {

namespace detail {

enum class op_kind : std::uint8_t { all_reduce, all_gather, reduce_scatter, broadcast, barrier, split };

[[nodiscard]] inline char const* name_of(op_kind k) noexcept {
  switch (k) {
    case op_kind::all_reduce: return "all_reduce";
    case op_kind::all_gather: return "all_gather";
    case op_kind::reduce_scatter: return "reduce_scatter";
    case op_kind::broadcast: return "broadcast";
    case op_kind::barrier: return "barrier";
    case op_kind::split: return "split";
  }
  return "?";
}

struct op_desc {
  op_kind kind{};
  std::type_info const* type = nullptr;
  std::size_t in_count = 0;
  std::size_t out_count = 0;
  reduce_op op = reduce_op::sum;
  int root = 0;

  [[nodiscard]] bool same_call(op_desc const& o) const noexcept {
    return kind == o.kind && *type == *o.type && in_count == o.in_count && out_count == o.out_count &&
           op == o.op && root == o.root;
  }
  [[nodiscard]] std::string describe() const {
    std::string s = name_of(kind);
    s += "<";
    s += type->name();
    s += ">(in=" + std::to_string(in_count) + ", out=" + std::to_string(out_count);
    if (kind == op_kind::all_reduce || kind == op_kind::reduce_scatter) s += std::string(", op=") + std::string(headroom::name_of(op));
    if (kind == op_kind::broadcast) s += ", root=" + std::to_string(root);
    return s + ")";
  }
};

struct message {
  std::type_info const* type;
  std::size_t count;
  std::vector<std::byte> bytes;
};

struct group_state {
  explicit group_state(int n)
      : size(n), desc(static_cast<std::size_t>(n)), input(static_cast<std::size_t>(n)), departed(static_cast<std::size_t>(n), 0) {}

  int const size;
  std::mutex mutex;
  std::condition_variable cv;
  std::uint64_t generation = 0;
  int arrived = 0;
  bool aborted = false;
  std::string abort_reason;

  std::vector<op_desc> desc;
  std::vector<void const*> input;
  std::vector<char> departed;  // ranks whose function returned: they will never arrive again
  int departed_count = 0;
  std::map<std::pair<int, int>, std::deque<message>> mailbox;  // (src, dst) -> FIFO

  // split: the group made for each (split sequence, color), handed to its members once each.
  std::uint64_t split_sequence = 0;
  std::map<std::pair<std::uint64_t, int>, std::pair<std::shared_ptr<group_state>, int>> pending_split;
  std::vector<std::weak_ptr<group_state>> children;
  std::vector<int> parent_ranks;  // for a split group: each member's rank in the parent

  // Caller holds the lock. Returns when all ranks arrived; throws if the group was aborted first.
  // A rank that gives up takes its arrival back, so a later call cannot count it and complete
  // a rendezvous that a departed rank never joined (it would read that rank's stale buffers).
  void arrive_and_wait(std::unique_lock<std::mutex>& lock) {
    if (aborted) throw group_aborted("thread_group aborted: " + abort_reason);
    if (departed_count > 0) throw_departed();  // a departed rank never arrives again
    std::uint64_t const gen = generation;
    if (arrive()) return;
    cv.wait(lock, [&] { return generation != gen || aborted || departed_count > 0; });
    if (generation == gen) {
      --arrived;
      if (aborted) throw group_aborted("thread_group aborted: " + abort_reason);
      throw_departed();
    }
  }
  [[noreturn]] void throw_departed() const {
    throw collective_mismatch("a rank left the group (" + departed_list() +
                              ") while others waited in a collective: ranks called different numbers of collectives");
  }

  // Phase two of a collective: every rank that completed phase one gets here (nothing between
  // the phases lets an exception out), so it waits for all of them, whatever happened to the
  // group meanwhile. Leaving early would free a buffer that peers are still reading.
  void arrive_and_wait_for_all(std::unique_lock<std::mutex>& lock) {
    std::uint64_t const gen = generation;
    if (arrive()) return;
    cv.wait(lock, [&] { return generation != gen; });
  }

  // Counts the caller in (lock held); the last rank to arrive opens the next generation.
  bool arrive() {
    if (++arrived < size) return false;
    arrived = 0;
    ++generation;
    cv.notify_all();
    return true;
  }

  [[nodiscard]] std::string departed_list() const {
    std::string s;
    for (std::size_t r = 0; r < departed.size(); ++r)
      if (departed[r]) s += (s.empty() ? "rank " : ", rank ") + std::to_string(r);
    return s;
  }

  // A rank leaving the parent leaves every group split from it too. noexcept and allocation-
  // free: it runs while a failing rank unwinds, where a second exception would terminate.
  // Children are visited under this group's lock; locks are only ever taken parent -> child.
  void depart(int rank) noexcept {
    std::lock_guard lock(mutex);
    if (!departed[static_cast<std::size_t>(rank)]) {
      departed[static_cast<std::size_t>(rank)] = 1;
      ++departed_count;
    }
    cv.notify_all();
    for (auto& w : children)
      if (auto c = w.lock()) {
        auto const it = std::find(c->parent_ranks.begin(), c->parent_ranks.end(), rank);
        if (it != c->parent_ranks.end()) c->depart(static_cast<int>(it - c->parent_ranks.begin()));
      }
  }

  // noexcept for the same reason: when the reason cannot be copied (out of memory), the group
  // is aborted without one.
  void abort(std::string const& why) noexcept {
    std::lock_guard lock(mutex);
    if (!aborted) {
      aborted = true;
      try {
        abort_reason = why;
      } catch (...) {
        abort_reason.clear();
      }
    }
    cv.notify_all();
    for (auto& w : children)
      if (auto c = w.lock()) c->abort(why);
  }
};

template <class T>
[[nodiscard]] T combine(T a, T b, reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return static_cast<T>(a + b);
    case reduce_op::max: return b > a ? b : a;
    case reduce_op::min: return b < a ? b : a;
  }
  return a;
}

}  // namespace detail

/// One rank's communicator on a thread_group. Cheap to copy; all copies name the same rank.
class thread_communicator {
 public:
  using stream_type = inline_stream;

  thread_communicator(std::shared_ptr<detail::group_state> state, int rank) : state_(std::move(state)), rank_(rank) {
    expects(state_ != nullptr, "thread_communicator: null group state");
    expects(rank_ >= 0 && rank_ < state_->size, "thread_communicator: rank ", rank_, " out of range [0, ",
            state_->size, ")");
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return state_->size; }

  template <class T>
  void all_reduce(std::span<T const> in, std::span<T> out, reduce_op op, inline_stream const& = {}) {
    static_assert(std::is_arithmetic_v<T>, "all_reduce needs an arithmetic element type");
    collective<T>({detail::op_kind::all_reduce, &typeid(T), in.size(), out.size(), op, 0}, in.data(), out,
                  [&](auto const& inputs, std::vector<T>& result) {
                    result.assign(inputs[0], inputs[0] + in.size());
                    for (std::size_t r = 1; r < inputs.size(); ++r)
                      for (std::size_t i = 0; i < in.size(); ++i) result[i] = detail::combine(result[i], inputs[r][i], op);
                  });
  }

  template <class T>
  void all_gather(std::span<T const> in, std::span<T> out, inline_stream const& = {}) {
    static_assert(std::is_trivially_copyable_v<T>);
    collective<T>({detail::op_kind::all_gather, &typeid(T), in.size(), out.size(), reduce_op::sum, 0}, in.data(), out,
                  [&](auto const& inputs, std::vector<T>& result) {
                    result.resize(out.size());
                    for (std::size_t r = 0; r < inputs.size(); ++r)
                      std::copy_n(inputs[r], in.size(), result.begin() + static_cast<std::ptrdiff_t>(r * in.size()));
                  });
  }

  template <class T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, reduce_op op, inline_stream const& = {}) {
    static_assert(std::is_arithmetic_v<T>, "reduce_scatter needs an arithmetic element type");
    collective<T>({detail::op_kind::reduce_scatter, &typeid(T), in.size(), out.size(), op, 0}, in.data(), out,
                  [&](auto const& inputs, std::vector<T>& result) {
                    std::size_t const m = out.size();
                    std::size_t const base = static_cast<std::size_t>(rank_) * m;
                    result.assign(inputs[0] + base, inputs[0] + base + m);
                    for (std::size_t r = 1; r < inputs.size(); ++r)
                      for (std::size_t i = 0; i < m; ++i) result[i] = detail::combine(result[i], inputs[r][base + i], op);
                  });
  }

  template <class T>
  void broadcast(std::span<T> buffer, int root, inline_stream const& = {}) {
    static_assert(std::is_trivially_copyable_v<T>);
    bool const is_root = root == rank_;
    collective<T>({detail::op_kind::broadcast, &typeid(T), buffer.size(), buffer.size(), reduce_op::sum, root},
                  buffer.data(), is_root ? std::span<T>{} : buffer,
                  [&](auto const& inputs, std::vector<T>& result) {
                    if (!is_root) result.assign(inputs[static_cast<std::size_t>(root)], inputs[static_cast<std::size_t>(root)] + buffer.size());
                  });
  }

  void barrier(inline_stream const& = {}) {
    collective<std::byte>({detail::op_kind::barrier, &typeid(void), 0, 0, reduce_op::sum, 0}, nullptr, {},
                          [](auto const&, std::vector<std::byte>&) {});
  }

  /// Buffered send: copies `data` into the peer's mailbox and returns.
  template <class T>
  void send(std::span<T const> data, int peer, inline_stream const& = {}) {
    static_assert(std::is_trivially_copyable_v<T>);
    check_peer(peer, "send");
    detail::message msg{&typeid(T), data.size(), std::vector<std::byte>(data.size_bytes())};
    if (!data.empty()) std::memcpy(msg.bytes.data(), data.data(), data.size_bytes());
    {
      std::lock_guard lock(state_->mutex);
      if (state_->aborted) throw group_aborted("thread_group aborted: " + state_->abort_reason);
      state_->mailbox[{rank_, peer}].push_back(std::move(msg));
    }
    state_->cv.notify_all();
  }

  /// Blocks until the next message from `peer` arrives; its type and size must match `data`.
  template <class T>
  void recv(std::span<T> data, int peer, inline_stream const& = {}) {
    static_assert(std::is_trivially_copyable_v<T>);
    check_peer(peer, "recv");
    detail::message msg;
    {
      std::unique_lock lock(state_->mutex);
      auto& box = state_->mailbox[{peer, rank_}];
      auto const gone = [&] { return state_->departed[static_cast<std::size_t>(peer)] != 0; };
      state_->cv.wait(lock, [&] { return !box.empty() || state_->aborted || gone(); });
      if (box.empty()) {
        if (state_->aborted) throw group_aborted("thread_group aborted: " + state_->abort_reason);
        throw collective_mismatch(headroom::detail::concat("recv on rank ", rank_, ": rank ", peer,
                                                 " returned without sending the expected message"));
      }
      msg = std::move(box.front());
      box.pop_front();
    }
    expects<collective_mismatch>(*msg.type == typeid(T) && msg.count == data.size(), "recv on rank ", rank_,
                                 ": expected ", data.size(), " elements of ", typeid(T).name(), " from rank ", peer,
                                 ", got ", msg.count, " elements of ", msg.type->name());
    if (!data.empty()) std::memcpy(data.data(), msg.bytes.data(), data.size_bytes());
  }

  /// Collective: ranks with the same `color` (>= 0) form a new group, ordered by (key, rank).
  [[nodiscard]] thread_communicator split(int color, int key) {
    std::int64_t const mine[2] = {color, key};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(size()));
    all_gather(std::span<std::int64_t const>(mine), std::span<std::int64_t>(all));
    std::vector<std::pair<std::int64_t, int>> members;  // (key, parent rank) of my color
    for (int r = 0; r < size(); ++r) {
      expects(all[2 * static_cast<std::size_t>(r)] >= 0, "thread_communicator::split: rank ", r, " passed color ",
              all[2 * static_cast<std::size_t>(r)], ", expected >= 0");
      if (all[2 * static_cast<std::size_t>(r)] == color) members.emplace_back(all[2 * static_cast<std::size_t>(r) + 1], r);
    }
    std::sort(members.begin(), members.end());
    int const new_rank = static_cast<int>(std::find_if(members.begin(), members.end(),
                                                       [&](auto const& m) { return m.second == rank_; }) -
                                          members.begin());
    std::shared_ptr<detail::group_state> child;
    {
      std::lock_guard lock(state_->mutex);
      auto const id = std::make_pair(state_->split_sequence, color);
      auto& slot = state_->pending_split[id];
      if (!slot.first) {
        slot.first = std::make_shared<detail::group_state>(static_cast<int>(members.size()));
        for (auto const& m : members) slot.first->parent_ranks.push_back(m.second);
        state_->children.push_back(slot.first);
      }
      child = slot.first;
      if (++slot.second == static_cast<int>(members.size())) state_->pending_split.erase(id);
    }
    barrier();  // everyone has taken its group before the sequence moves on
    {
      std::lock_guard lock(state_->mutex);
      if (rank_ == 0) ++state_->split_sequence;
    }
    barrier();
    return thread_communicator(std::move(child), new_rank);
  }

  /// Aborts the whole group (and groups split from it): waiting ranks get group_aborted.
  void abort(std::string const& why) const noexcept { state_->abort(why); }

  /// Declares that this rank will issue no more calls (launch does it when a rank returns),
  /// so peers still waiting on it get an error instead of waiting forever.
  void leave() const { state_->depart(rank_); }

  friend bool operator==(thread_communicator const& a, thread_communicator const& b) noexcept {
    return a.state_ == b.state_ && a.rank_ == b.rank_;
  }

 private:
  void check_peer(int peer, char const* what) const {
    expects(peer >= 0 && peer < size() && peer != rank_, what, " on rank ", rank_, ": peer ", peer,
            " out of range [0, ", size(), ") or equal to own rank");
  }

  // Runs one rendezvous. `compute(inputs, result)` reads every rank's input (typed T const*)
  // and fills this rank's result, which is copied to `out` after all ranks finished reading.
  template <class T, class Compute>
  void collective(detail::op_desc d, void const* input, std::span<T> out, Compute&& compute) {
    auto& st = *state_;
    std::string problem;
    std::exception_ptr failure;  // caught between the phases, rethrown after phase two
    std::vector<T const*> inputs(static_cast<std::size_t>(st.size));
    std::vector<T> result;
    {
      std::unique_lock lock(st.mutex);
      st.desc[static_cast<std::size_t>(rank_)] = d;
      st.input[static_cast<std::size_t>(rank_)] = input;
      st.arrive_and_wait(lock);
      try {
        problem = validate();
      } catch (...) {  // out of memory building the verdict
        failure = std::current_exception();
      }
      for (std::size_t r = 0; r < inputs.size(); ++r) inputs[r] = static_cast<T const*>(st.input[r]);
    }
    if (problem.empty() && !failure) {
      try {
        compute(inputs, result);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    {
      std::unique_lock lock(st.mutex);
      st.arrive_and_wait_for_all(lock);  // nobody reuses its buffers until all have read them
    }
    if (failure) std::rethrow_exception(failure);
    if (!problem.empty()) throw collective_mismatch(problem);
    if (!result.empty()) std::copy(result.begin(), result.end(), out.begin());
  }

  // Caller holds the lock, after phase one: every rank computes the same verdict.
  [[nodiscard]] std::string validate() const {
    auto const& desc = state_->desc;
    int const n = state_->size;
    bool same = true;
    for (auto const& d : desc) same = same && d.same_call(desc[0]);
    if (!same) {
      std::string s = "ranks called different collectives:";
      for (int r = 0; r < n; ++r) s += " [rank " + std::to_string(r) + "] " + desc[static_cast<std::size_t>(r)].describe();
      return s;
    }
    auto const& d = desc[0];
    auto const nn = static_cast<std::size_t>(n);
    switch (d.kind) {
      case detail::op_kind::all_reduce:
        if (d.out_count != d.in_count)
          return d.describe() + ": output must have as many elements as the input (" + std::to_string(d.in_count) + ")";
        break;
      case detail::op_kind::all_gather:
        if (d.out_count != d.in_count * nn)
          return d.describe() + ": output must hold input x group size = " + std::to_string(d.in_count * nn) + " elements";
        break;
      case detail::op_kind::reduce_scatter:
        if (d.in_count != d.out_count * nn)
          return d.describe() + ": input must hold output x group size = " + std::to_string(d.out_count * nn) + " elements";
        break;
      case detail::op_kind::broadcast:
        if (d.root < 0 || d.root >= n)
          return d.describe() + ": root " + std::to_string(d.root) + " out of range [0, " + std::to_string(n) + ")";
        break;
      default: break;
    }
    return {};
  }

  std::shared_ptr<detail::group_state> state_;
  int rank_;
};
static_assert(communicator<thread_communicator>);

/// Owns the shared state of `size` ranks; hands out one communicator per rank.
class thread_group {
 public:
  explicit thread_group(int size) {
    expects(size >= 1, "thread_group: size ", size, " must be >= 1");
    state_ = std::make_shared<detail::group_state>(size);
  }
  [[nodiscard]] int size() const noexcept { return state_->size; }
  [[nodiscard]] thread_communicator communicator(int rank) const { return thread_communicator(state_, rank); }
  void abort(std::string const& why) const noexcept { state_->abort(why); }

 private:
  std::shared_ptr<detail::group_state> state_;
};

namespace detail {
/// Aborts `group` with the reason `why()` builds, or with none when building it throws.
template <class Why>
void abort_group(thread_group const& group, Why&& why) noexcept {
  try {
    group.abort(why());
  } catch (...) {
    group.abort(std::string());  // an empty reason needs no allocation
  }
}
}  // namespace detail

/// Runs `fn(communicator)` on `n` threads, one per rank, and joins them. If a rank throws,
/// the group is aborted (so no rank waits forever); a rank that returns leaves the group, so
/// a peer still waiting on it gets collective_mismatch. After all threads joined, the exception
/// of the lowest rank that failed for its own reason (not group_aborted) is rethrown.
template <class Fn>
  requires std::invocable<Fn&, thread_communicator&>
void launch(int n, Fn&& fn) {
  thread_group group(n);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<char> aborted_only(static_cast<std::size_t>(n), 0);  // not vector<bool>: ranks write concurrently
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) try {
      threads.emplace_back([&, r] {
        auto comm = group.communicator(r);
        try {
          std::invoke(fn, comm);
        } catch (group_aborted const&) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          aborted_only[static_cast<std::size_t>(r)] = 1;
        } catch (std::exception const& e) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          detail::abort_group(group, [&] { return "rank " + std::to_string(r) + " failed: " + e.what(); });
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          detail::abort_group(group, [&] { return "rank " + std::to_string(r) + " failed with a non-standard exception"; });
        }
        comm.leave();
      });
    } catch (...) {
      // A thread failed to start (out of memory): the ranks already running would wait for it
      // forever, and the jthreads' destructors (on the way out) would wait for them.
      detail::abort_group(group, [&] { return "launch: could not start rank " + std::to_string(r); });
      throw;
    }
  }
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (errors[r] && !aborted_only[r]) std::rethrow_exception(errors[r]);
  for (auto const& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace headroom::host
