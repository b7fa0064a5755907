// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Policies of the pool module, CUTLASS style: empty tags or small classes passed as template
// arguments.
//
//   planner      fixed | max                     which slots a plan has (plan.hpp)
//   category     by_dtype | by_bytes             which buckets may share a slot
//   padding      no_padding | pad_elements | align_bytes<A>   sizes the plan is made for
//   assignment   strict | first_free             which buffer group a unit's bucket takes
//   non-unit     dynamic | persistent            where buckets without a slot live
//   release      record_if_cross_stream | record_at_release | record_at_reuse   when the release event is recorded
//   off-trace    reject_off_trace | fallback_off_trace  interval plans: a unit whose bytes are held
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "headroom/core/bytes.hpp"
#include "headroom/core/dtype.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool/workload.hpp"

namespace headroom::pool {

// ---- planners ------------------------------------------------------------------------------

/// Megatron-FSDP FixedPoolAllocator: N copies of the most common unit shape (ordered buckets
/// of equal category and size); units of any other shape get no slot.
struct fixed {
  static constexpr std::string_view name = "fixed";
};
/// Megatron-FSDP MaxPoolAllocator: per category, the i-th largest bucket of every unit shares
/// slot i, sized to the largest of them; N copies. Every unit fits, and the total is minimal
/// for one bucket per slot.
struct max {
  static constexpr std::string_view name = "max";
};

template <class P>
concept planner_policy = std::same_as<P, fixed> || std::same_as<P, max>;

// ---- categories ----------------------------------------------------------------------------

using category_id = std::uint32_t;

/// Slots are typed by dtype, as in Megatron (fp8 arrives as u8 already).
struct by_dtype {
  static constexpr std::string_view name = "by_dtype";
  [[nodiscard]] static constexpr category_id category_of(bucket const& b) noexcept {
    return static_cast<category_id>(b.type);
  }
  [[nodiscard]] static std::string category_name(category_id c) { return std::string(name_of(static_cast<dtype>(c))); }
};
/// Slots are untyped bytes: one bf16 bucket and one fp8 bucket of two units may share a slot
/// (the engine views the slot as the dtype it needs). Megatron cannot do this.
struct by_bytes {
  static constexpr std::string_view name = "by_bytes";
  [[nodiscard]] static constexpr category_id category_of(bucket const&) noexcept { return 0; }
  [[nodiscard]] static std::string category_name(category_id) { return "bytes"; }
};

template <class C>
concept category_policy = requires(bucket const& b, category_id c) {
  { C::name } -> std::convertible_to<std::string_view>;
  { C::category_of(b) } -> std::same_as<category_id>;
  { C::category_name(c) } -> std::convertible_to<std::string>;
};
static_assert(category_policy<by_dtype>);
static_assert(category_policy<by_bytes>);

// ---- padding -------------------------------------------------------------------------------

/// Plan on the bucket sizes as given (Megatron's planning on un-padded numel).
struct no_padding {
  [[nodiscard]] std::uint64_t padded_bytes(bucket const& b) const noexcept { return b.bytes; }
  [[nodiscard]] std::string describe() const { return "none"; }
};

/// Pads each bucket's element count to a multiple of `multiple` elements: Megatron's runtime
/// size `_pad(numel, dp_size * chunk_size_factor)`. Planning on it keeps slot addresses fixed
/// when the padded requests arrive.
struct pad_elements {
  std::uint64_t multiple = 1;

  [[nodiscard]] std::uint64_t padded_bytes(bucket const& b) const {
    expects(multiple > 0, "pool::pad_elements: multiple must be > 0, got ", multiple);
    std::uint64_t const size = size_of(b.type);
    expects(b.bytes % size == 0, "pool::pad_elements: bucket '", b.label, "' has ", b.bytes,
            " bytes, not a whole number of ", name_of(b.type), " elements (", size, " bytes each)");
    std::uint64_t const padded = round_up(b.bytes / size, multiple);
    expects<capacity_error>(padded <= UINT64_MAX / size, "pool::pad_elements: ", padded, " elements overflow");
    return padded * size;
  }
  [[nodiscard]] std::string describe() const { return "pad elements to x" + std::to_string(multiple); }
};

/// Rounds each bucket up to a multiple of `Alignment` bytes (a power of two).
template <std::size_t Alignment>
struct align_bytes {
  static_assert(is_power_of_two(Alignment), "align_bytes: Alignment must be a power of two");
  [[nodiscard]] std::uint64_t padded_bytes(bucket const& b) const { return align_up(b.bytes, Alignment); }
  [[nodiscard]] std::string describe() const { return "align bytes to " + std::to_string(Alignment); }
};

template <class P>
concept padding_policy = std::copyable<P> && requires(P const& p, bucket const& b) {
  { p.padded_bytes(b) } -> std::same_as<std::uint64_t>;
  { p.describe() } -> std::convertible_to<std::string>;
};
static_assert(padding_policy<no_padding>);
static_assert(padding_policy<pad_elements>);
static_assert(padding_policy<align_bytes<256>>);

// ---- assignment ----------------------------------------------------------------------------

/// Reported when a strictly assigned bucket cannot take its pinned group and moves.
struct move_event {
  std::size_t unit = 0;
  std::string_view unit_name;
  std::size_t bucket = 0;
  std::uint32_t pinned_group = 0;
  std::uint32_t taken_group = 0;
  std::uint32_t holder_unit = 0;  ///< the unit that holds the pinned slot
  std::string_view message;       ///< one printable line
};

/// Megatron's strict assignment: a bucket is pinned to the buffer group it first gets; later
/// acquires retry that group; if it is held, the bucket takes the lowest free group without
/// re-pinning, the move is counted and reported to the logger. (A move during warm-up or CUDA
/// graph capture means a captured address is now used by another unit: fix the schedule.)
class strict {
 public:
  static constexpr std::string_view name = "strict";
  static constexpr bool pins = true;
  using logger = std::function<void(move_event const&)>;

  strict() = default;
  explicit strict(logger log) : log_(std::move(log)) {}

  void report(move_event const& e) const {
    if (log_) log_(e);
  }

 private:
  logger log_;
};

/// Lowest free group every time; nothing is pinned.
struct first_free {
  static constexpr std::string_view name = "first_free";
  static constexpr bool pins = false;
  void report(move_event const&) const noexcept {}
};

template <class A>
concept assignment_policy = std::copyable<A> && requires(A const& a, move_event const& e) {
  { A::name } -> std::convertible_to<std::string_view>;
  { A::pins } -> std::convertible_to<bool>;
  a.report(e);
};
static_assert(assignment_policy<strict>);
static_assert(assignment_policy<first_free>);

// ---- buckets without a slot ----------------------------------------------------------------

/// Allocated from the upstream resource at acquire and freed (stream-ordered) at release:
/// Megatron's default backup allocator. Addresses change; not registrable, not capturable.
struct dynamic {
  static constexpr std::string_view name = "dynamic";
  static constexpr bool persistent_buffers = false;
};
/// One buffer per bucket, allocated at pool construction in plan order and kept until the pool
/// dies (Megatron's fsdp_db_use_persist_buf_on_alloc_fail): fixed addresses, at full memory cost.
struct persistent {
  static constexpr std::string_view name = "persistent";
  static constexpr bool persistent_buffers = true;
};

template <class N>
concept non_unit_policy = std::same_as<N, dynamic> || std::same_as<N, persistent>;

// ---- when the release event is recorded -----------------------------------------------------
//
// A slot freed by release(lease, s) may be reused by work ordered after the release. On s itself
// stream order already guarantees that; another stream must wait on an event recorded on s. The
// policies differ in when that event is recorded: `records_at_release(cross_stream)` says whether
// release records it (cross_stream: the lease was acquired on another stream than s); if not, the
// first acquire on another stream records it on s then, and waits (the reuser then also waits for
// work issued to s after the release: never unsafe, may serialise more).

/// Default. Records at release when the lease crosses streams (acquired on one stream, released
/// on another: the next user of its slots is expected on the acquiring stream, as in FSDP, which
/// prefetches on a collective stream and releases on the compute stream); a lease acquired and
/// released on one stream records nothing (the next user is expected there: stream order is
/// enough). A reuse the guess missed (released on s after acquiring on s, then acquired on t)
/// records on s at the reuse.
struct record_if_cross_stream {
  static constexpr std::string_view name = "record_if_cross_stream";
  [[nodiscard]] static constexpr bool records_at_release(bool cross_stream) noexcept { return cross_stream; }
};
/// Every release records (one cudaEventRecord per release): exact for any reuse, whatever the
/// stream; costs the record where nothing waits. For engines whose slots move between streams
/// unpredictably (acquired and released on one stream, then reused on another while that
/// stream keeps working).
struct record_at_release {
  static constexpr std::string_view name = "record_at_release";
  [[nodiscard]] static constexpr bool records_at_release(bool) noexcept { return true; }
};
/// No release records; a reuse on another stream records on the releasing stream then and
/// waits: the reuser waits for all work issued there up to the reuse. Cheapest on the host;
/// exact when nothing is issued to the releasing stream between the release and the reuse (FSDP
/// prefetching unit u+1 before computing unit u); serialises otherwise (issuing compute of u,
/// then prefetching u+1 makes the prefetch wait for that compute). The releasing stream must
/// outlive the next acquire of the slot.
struct record_at_reuse {
  static constexpr std::string_view name = "record_at_reuse";
  [[nodiscard]] static constexpr bool records_at_release(bool) noexcept { return false; }
};

template <class O>
concept release_order_policy =
    std::same_as<O, record_if_cross_stream> || std::same_as<O, record_at_release> || std::same_as<O, record_at_reuse>;

// ---- interval plans: a unit whose bytes a held unit occupies -------------------------------

/// Default. Acquiring a unit that shares arena bytes with a held unit (an order no registered
/// order allows) throws logic_error naming both units and their positions in the orders.
struct reject_off_trace {
  static constexpr std::string_view name = "reject_off_trace";
  static constexpr bool fallback = false;
};
/// Such a unit gets buffers from the upstream instead (stream-ordered, freed at release) and the
/// pool counts it (pool_stats::off_trace_fallbacks), as strict assignment counts moves. The
/// addresses differ from the plan's: not registered, not capturable.
struct fallback_off_trace {
  static constexpr std::string_view name = "fallback_off_trace";
  static constexpr bool fallback = true;
};

template <class O>
concept off_trace_policy = std::same_as<O, reject_off_trace> || std::same_as<O, fallback_off_trace>;

}  // namespace headroom::pool
