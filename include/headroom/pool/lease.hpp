// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// unit_lease: the buffers of one unit (or non-unit bucket) while a unit_pool holds them for the
// caller. unit_pool<...>::lease is unit_lease<that pool>.
//
//   auto l = pool.acquire(u, stream);
//   l.bytes(b);             // bucket b's padded bytes, at a fixed address while pooled
//   l.view<bf16>(b, n);     // the first n elements (capacity_error beyond the plan)
//   pool.release(l, stream);
//
// Move-only. A lease dropped without release keeps its slots held (exhaustion errors then name
// it); move-assigning over a lease that still holds slots throws instead of losing them.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

#include "headroom/core/error.hpp"
#include "headroom/pool/pool_stats.hpp"

namespace headroom::pool {

template <class Pool>
class unit_lease {
 public:
  unit_lease() = default;
  unit_lease(unit_lease const&) = delete;
  unit_lease& operator=(unit_lease const&) = delete;
  unit_lease(unit_lease&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)), target_(o.target_), epoch_(o.epoch_) {}
  /// Throws logic_error when this lease still holds slots: overwriting it would keep them
  /// held forever. Release it first.
  unit_lease& operator=(unit_lease&& o) {
    if (this == &o) return *this;
    if (pool_ != nullptr) [[unlikely]]
      detail::fail<logic_error>("unit_pool::lease: move-assigning over a lease that still holds ",
                                pool_->describe_target(target_), "; release it first");
    pool_ = std::exchange(o.pool_, nullptr);
    target_ = o.target_;
    epoch_ = o.epoch_;
    return *this;
  }
  ~unit_lease() = default;

  /// False once released or moved from.
  [[nodiscard]] bool valid() const noexcept { return pool_ != nullptr; }
  [[nodiscard]] target_kind kind() const {
    check("kind");
    return pool_->is_unit(target_) ? target_kind::unit : target_kind::non_unit;
  }
  /// Unit index (kind unit) or non-unit bucket index (kind non_unit).
  [[nodiscard]] std::size_t index() const {
    check("index");
    return pool_->external_index(target_);
  }
  [[nodiscard]] std::size_t size() const {
    check("size");
    return pool_->bucket_count(target_);
  }
  /// Bucket `b`'s bytes (its padded request size) at a fixed address while pooled.
  [[nodiscard]] std::span<std::byte> bytes(std::size_t b) const {
    check("bytes");
    return pool_->buffer(target_, b);
  }
  /// The first `n` bytes of bucket `b`; throws capacity_error naming unit, bucket, request and
  /// slot size when `n` exceeds it (a request the plan did not foresee never moves the slot).
  [[nodiscard]] std::span<std::byte> bytes(std::size_t b, std::uint64_t n) const {
    auto const all = bytes(b);
    expects<capacity_error>(n <= all.size(), "unit_pool: request of ", n, " bytes for bucket ", b, " of ",
                            pool_->describe_target(target_), " exceeds its planned ", all.size(),
                            " bytes; plan on the padded size (padding policy)");
    return all.first(static_cast<std::size_t>(n));
  }
  /// Bucket `b` viewed as `count` elements of T (all that fit when count is omitted).
  template <class T>
  [[nodiscard]] std::span<T> view(std::size_t b, std::size_t count = std::numeric_limits<std::size_t>::max()) const {
    static_assert(std::is_trivially_copyable_v<T>);
    auto const all = bytes(b);
    if (count == std::numeric_limits<std::size_t>::max()) count = all.size() / sizeof(T);
    expects<capacity_error>(count <= all.size() / sizeof(T), "unit_pool: view of ", count, " elements of ", sizeof(T),
                            " bytes on bucket ", b, " of ", pool_->describe_target(target_), " exceeds its planned ",
                            all.size(), " bytes");
    expects(reinterpret_cast<std::uintptr_t>(all.data()) % alignof(T) == 0, "unit_pool: bucket ", b,
            " address is not aligned for an element of alignment ", alignof(T));
    return {reinterpret_cast<T*>(all.data()), count};
  }
  /// Slot index of bucket `b` in the plan, or none (max size_t) for a fallback buffer.
  [[nodiscard]] std::size_t slot(std::size_t b) const {
    check("slot");
    return pool_->slot_of(target_, b);
  }

 private:
  friend Pool;
  unit_lease(Pool* p, std::uint32_t t, std::uint64_t e) noexcept : pool_(p), target_(t), epoch_(e) {}
  void check(char const* what) const {
    if (pool_ == nullptr) [[unlikely]]
      detail::fail<logic_error>("unit_pool::lease::", what, ": lease is empty (released or moved from)");
  }
  Pool* pool_ = nullptr;
  std::uint32_t target_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace headroom::pool
