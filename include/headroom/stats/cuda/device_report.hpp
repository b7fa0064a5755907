// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// device_report_view: the device-side writer of a device-resident report (device_reducer.hpp).
//
// A device-resident report keeps each field as its order key (stats/detail/order_key.hpp) in
// device memory, so that the reduction across ranks is one all_reduce(max, int64) of those words
// with nothing packed on the host. Kernels write through this view:
//
//   __global__ void step_stats(stats::cuda::device_report_view<step_report> r, ...) {
//     r.set<0>(std::int64_t{bytes_in_use});       // this rank's value of field 0
//     r.fold<1>(local_peak);                      // atomically keep the max (or the min of a
//   }                                             // stats::minimum field) of many threads
//
// set / fold encode exactly like the host reducer (int64 stays exact over its whole range,
// doubles keep every bit, ±0.0 stay distinct, NaN follows the Nan policy), so the host decodes
// the reduced words with the same code. The functions are __host__ __device__ under nvcc and
// plain inline functions elsewhere, so the encoding is testable without a GPU.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "headroom/core/communicator.hpp"
#include "headroom/stats/policies.hpp"
#include "headroom/stats/report.hpp"

#if defined(__CUDACC__)
#define HEADROOM_STATS_HD __host__ __device__ __forceinline__
#else
#define HEADROOM_STATS_HD inline
#endif

namespace headroom::stats::cuda {

namespace detail {

inline constexpr std::int64_t device_key_max = INT64_MAX;
inline constexpr std::int64_t device_key_min = INT64_MIN;

[[nodiscard]] HEADROOM_STATS_HD std::int64_t bits_of(double d) noexcept {
#if defined(__CUDA_ARCH__)
  return __double_as_longlong(d);
#else
  return std::bit_cast<std::int64_t>(d);
#endif
}

// The order keys of stats::detail::encode (order_key.hpp), callable from kernels (that header's
// functions are host-only constexpr). tests/stats/device_keys.cpp and tests/stats/device_reduce.cu
// check that both give the same key for every kind of value.
[[nodiscard]] HEADROOM_STATS_HD std::int64_t order_key(std::int64_t v, reduce_op op) noexcept {
  return op == reduce_op::min ? ~v : v;
}
[[nodiscard]] HEADROOM_STATS_HD std::int64_t order_key(double v, reduce_op op, bool nan_propagates) noexcept {
  if (v != v) return nan_propagates ? device_key_max : device_key_min;
  std::int64_t const b = bits_of(v);
  std::int64_t const k = b < 0 ? (b ^ device_key_max) : b;
  return op == reduce_op::min ? ~k : k;
}

/// One field of a device view: its element type and op, without its name (nvcc cannot write a
/// kernel's host stub when a parameter's type carries the string of a stats::field).
template <stat_value T, reduction_policy Op>
struct device_slot {
  using value_type = T;
  static constexpr reduce_op op = Op::op;
};
}  // namespace detail

/// Writes the fields of a report that lives in device memory, as order keys. A view is one
/// pointer: pass it to kernels by value. Name it device_report_view<R> (below); obtain it from
/// device_reducer::view(), whose keys are the reducer's send words.
template <nan_policy Nan, class... Slots>
class basic_device_report_view {
  template <std::size_t I>
  using slot_t = std::tuple_element_t<I, std::tuple<Slots...>>;

 public:
  /// This type, named without the report: a __global__ function's parameters must be spelled
  /// so (nvcc's host stub cannot write a stats::field's string argument): `using view = device_report_view<R>::self;`
  using self = basic_device_report_view;
  template <std::size_t I>
  using value_t = typename slot_t<I>::value_type;
  static constexpr std::size_t size() noexcept { return sizeof...(Slots); }

  constexpr basic_device_report_view() noexcept = default;
  HEADROOM_STATS_HD explicit basic_device_report_view(std::int64_t* keys) noexcept : keys_(keys) {}

  /// Field I := v.
  template <std::size_t I>
    requires(I < sizeof...(Slots))
  HEADROOM_STATS_HD void set(value_t<I> v) const noexcept {
    keys_[I] = key<I>(v);
  }
  /// Field I := max(field I, v), or min for a stats::minimum field; atomic on the device, so any
  /// number of threads may fold into the same field.
  template <std::size_t I>
    requires(I < sizeof...(Slots))
  HEADROOM_STATS_HD void fold(value_t<I> v) const noexcept {
    std::int64_t const k = key<I>(v);
#if defined(__CUDA_ARCH__)
    atomicMax(reinterpret_cast<long long*>(keys_ + I), static_cast<long long>(k));
#else
    if (k > keys_[I]) keys_[I] = k;
#endif
  }
  /// The order key field I holds for v.
  template <std::size_t I>
    requires(I < sizeof...(Slots))
  [[nodiscard]] HEADROOM_STATS_HD static std::int64_t key(value_t<I> v) noexcept {
    constexpr reduce_op op = slot_t<I>::op;
    if constexpr (std::is_same_v<value_t<I>, double>)
      return detail::order_key(v, op, Nan::propagates);
    else
      return detail::order_key(v, op);
  }

  [[nodiscard]] HEADROOM_STATS_HD std::int64_t* keys() const noexcept { return keys_; }

 private:
  std::int64_t* keys_ = nullptr;
};

namespace detail {
template <class R, class Nan>
struct device_view_of;
template <class... Fs, class Nan>
struct device_view_of<report<Fs...>, Nan> {
  using type = basic_device_report_view<Nan, device_slot<typename Fs::value_type, typename Fs::policy>...>;
};
}  // namespace detail

/// The device writer of typed report R: field I of R is field I of the view.
template <typed_report R, nan_policy Nan = propagate_nan>
using device_report_view = typename detail::device_view_of<std::remove_cvref_t<R>, Nan>::type;

}  // namespace headroom::stats::cuda
