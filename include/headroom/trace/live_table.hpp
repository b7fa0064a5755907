// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// live_table: the blocks and segments alive now, keyed by (address, is segment), in a
// preallocated open-addressing table (linear probing, backward-shift deletion). The recorder
// keeps it up to date even outside profiled steps, so a snapshot can show the blocks that
// were live when the step began. Never allocates after construction; when `max_live` entries
// are live, further ones are counted as untracked instead (the recorder flags their events, and
// take_snapshot leaves those blocks out of the file, consistently, and says how many).
// sharded_live_table splits the table in parts by address, each behind its own lock, for
// recorders that several threads write.
#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/trace/event.hpp"

namespace headroom::trace {

struct live_entry {
  std::uint64_t addr = 0;  ///< 0 marks an empty slot (allocators never return null)
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  category what{};
  frame where{};
  bool segment = false;
  bool pending_free = false;  ///< free_requested seen, free_completed not yet
};

/// The most entries a live table takes: its slots (twice that, rounded up to a power of two)
/// must be countable, and 2^32 live blocks is past any allocator.
inline constexpr std::size_t max_live_limit = std::size_t{1} << 32;

class live_table {
 public:
  explicit live_table(std::size_t max_live)
      : max_live_((expects(max_live > 0, "trace::live_table: max_live is 0; expected at least 1 block"),
                   expects<capacity_error>(max_live <= max_live_limit, "trace::live_table: max_live = ", max_live,
                                           "; expected at most 2^32 (", max_live_limit, ") live blocks"),
                   max_live)),
        mask_(std::bit_ceil(max_live * 2) - 1),
        slots_(std::make_unique<live_entry[]>(mask_ + 1)) {}

  /// Adds or replaces the entry for (e.addr, e.segment). False (and counted) when full.
  bool insert(live_entry const& e) noexcept {
    std::size_t i = home(e.addr, e.segment);
    while (slots_[i].addr != 0) {
      if (slots_[i].addr == e.addr && slots_[i].segment == e.segment) {
        slots_[i] = e;
        return true;
      }
      i = (i + 1) & mask_;
    }
    if (size_ == max_live_) {
      ++untracked_;
      return false;
    }
    slots_[i] = e;
    ++size_;
    return true;
  }

  /// Starts loading the slot where (addr, segment) would be, to be written soon. The recorder
  /// calls it before reading the counter, which on x86 waits for loads already under way
  /// but not for prefetches.
  void prefetch(std::uint64_t addr, bool segment) const noexcept {
    __builtin_prefetch(&slots_[home(addr, segment)], 1);
  }

  [[nodiscard]] live_entry* find(std::uint64_t addr, bool segment) noexcept {
    for (std::size_t i = home(addr, segment); slots_[i].addr != 0; i = (i + 1) & mask_) {
      if (slots_[i].addr == addr && slots_[i].segment == segment) return &slots_[i];
    }
    return nullptr;
  }

  [[nodiscard]] live_entry const* find(std::uint64_t addr, bool segment) const noexcept {
    return const_cast<live_table*>(this)->find(addr, segment);
  }

  /// Removes (addr, segment), copying it to `*removed` when given; false when it was not live
  /// (allocated before tracking, or untracked).
  bool erase(std::uint64_t addr, bool segment, live_entry* removed = nullptr) noexcept {
    return erase(addr, segment, [removed](live_entry const& e) {
      if (removed != nullptr) *removed = e;
    });
  }

  /// Removes (addr, segment), first calling `seen(entry)`; false when it was not live. The
  /// recorder reads what it needs from the entry in place instead of copying all of it.
  template <class F>
    requires std::invocable<F&, live_entry const&>
  bool erase(std::uint64_t addr, bool segment, F&& seen) noexcept {
    live_entry* found = find(addr, segment);
    if (found == nullptr) return false;
    seen(static_cast<live_entry const&>(*found));
    std::size_t hole = static_cast<std::size_t>(found - slots_.get());
    // Backward shift: move later entries of the probe run into the hole when their home
    // position allows it, so lookups never need tombstones.
    for (std::size_t j = (hole + 1) & mask_; slots_[j].addr != 0; j = (j + 1) & mask_) {
      std::size_t const h = home(slots_[j].addr, slots_[j].segment);
      bool const movable = ((j - h) & mask_) >= ((j - hole) & mask_);
      if (movable) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].addr = 0;  // empty: only the key is read in an empty slot
    --size_;
    return true;
  }

  void clear() noexcept {
    for (std::size_t i = 0; i <= mask_; ++i) slots_[i] = live_entry{};
    size_ = 0;
    untracked_ = 0;
  }

  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = 0; i <= mask_; ++i) {
      if (slots_[i].addr != 0) f(slots_[i]);
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t max_live() const noexcept { return max_live_; }
  /// Allocations not tracked because the table was full.
  [[nodiscard]] std::uint64_t untracked() const noexcept { return untracked_; }

 private:
  [[nodiscard]] std::size_t home(std::uint64_t addr, bool segment) const noexcept {
    std::uint64_t const h = ((addr >> 4) ^ (segment ? 0x9e37u : 0u)) * 0x9e3779b97f4a7c15ull;
    return static_cast<std::size_t>(h >> 20) & mask_;
  }

  std::size_t max_live_;
  std::size_t mask_;
  std::unique_ptr<live_entry[]> slots_;
  std::size_t size_ = 0;
  std::uint64_t untracked_ = 0;
};

/// `Shards` live_tables of max_live / Shards entries each (rounded up), the shard chosen by
/// address; each with a lock of type Lock taken by the recorder around its update. The count is
/// a template argument so that one shard (single_thread) costs no hashing and no lookup.
template <class Lock, std::size_t Shards>
  requires(std::has_single_bit(Shards))
class sharded_live_table {
 public:
  struct alignas(64) shard {
    explicit shard(std::size_t max_live) : table(max_live) {}
    Lock lock;
    live_table table;
  };

  explicit sharded_live_table(std::size_t max_live)
      : max_live_((expects(max_live > 0, "trace::live_table: max_live is 0; expected at least 1 block"), max_live)),
        shards_(make_shards((max_live + Shards - 1) / Shards, std::make_index_sequence<Shards>{})) {}

  [[nodiscard]] shard& shard_of(std::uint64_t addr) noexcept {
    if constexpr (Shards == 1) {
      (void)addr;
      return shards_[0];
    } else {
      // By 64 KiB region: threads that allocate from different regions (their own arenas or
      // pools) rarely take the same shard's lock, so its cache line stays with one core.
      return shards_[static_cast<std::size_t>(((addr >> 16) * 0x9e3779b97f4a7c15ull) >> 40) & (Shards - 1)];
    }
  }

  /// The entry of (addr, segment), copied; null when not live.
  [[nodiscard]] live_entry const* find(std::uint64_t addr, bool segment) const noexcept {
    auto& s = const_cast<sharded_live_table*>(this)->shard_of(addr);
    return s.table.find(addr, segment);
  }
  [[nodiscard]] std::size_t size() const noexcept {
    std::size_t n = 0;
    for (auto const& s : shards_) n += s.table.size();
    return n;
  }
  [[nodiscard]] std::size_t max_live() const noexcept { return max_live_; }
  [[nodiscard]] std::uint64_t untracked() const noexcept {
    std::uint64_t n = 0;
    for (auto const& s : shards_) n += s.table.untracked();
    return n;
  }
  template <class F>
  void for_each(F&& f) const {
    for (auto const& s : shards_) s.table.for_each(f);
  }
  void clear() noexcept {
    for (auto& s : shards_) {
      std::lock_guard lock(s.lock);
      s.table.clear();
    }
  }

 private:
  template <std::size_t... I>
  static std::array<shard, Shards> make_shards(std::size_t per_shard, std::index_sequence<I...>) {
    return {{((void)I, shard(per_shard))...}};
  }

  std::size_t max_live_;
  // In place, not behind pointers: one load fewer before the slot's address is known.
  std::array<shard, Shards> shards_;
};

}  // namespace headroom::trace
