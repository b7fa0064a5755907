// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Compile-time mapping of element types and reduce ops to NCCL's enums.
//
//   int8/uint8 (and char), int32/uint32, int64/uint64 (and long long), __half, __nv_bfloat16,
//   float, double; std::byte moves as uint8 but cannot be reduced. Anything else (bool, 16-bit
//   integers, long double, class types) is a compile error naming the supported types.
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cuda/dtype.hpp"

namespace headroom::nccl {

namespace detail {
template <class T>
inline constexpr bool always_false = false;

template <class T>
struct datatype_of {
  static_assert(always_false<T>,
                "headroom::nccl: this element type has no NCCL data type. Supported: int8_t, uint8_t, int32_t, "
                "uint32_t, int64_t, uint64_t, __half, __nv_bfloat16, float, double (std::byte for data movement "
                "only)");
  static constexpr ncclDataType_t value = ncclUint8;
  static constexpr bool reducible = false;
};

template <ncclDataType_t V, bool Reducible = true>
struct datatype_constant {
  static constexpr ncclDataType_t value = V;
  static constexpr bool reducible = Reducible;
};

template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
struct datatype_of<T> {
  static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8,
                "headroom::nccl: NCCL has 8-, 32- and 64-bit integers only (no 16-bit integer type)");
  static constexpr ncclDataType_t value = sizeof(T) == 1   ? (std::is_signed_v<T> ? ncclInt8 : ncclUint8)
                                          : sizeof(T) == 4 ? (std::is_signed_v<T> ? ncclInt32 : ncclUint32)
                                                           : (std::is_signed_v<T> ? ncclInt64 : ncclUint64);
  static constexpr bool reducible = true;
};
template <class T>
  requires std::is_same_v<T, bool>
struct datatype_of<T> {
  static_assert(always_false<T>, "headroom::nccl: bool has no NCCL data type; use uint8_t");
};
template <> struct datatype_of<float> : datatype_constant<ncclFloat32> {};
template <> struct datatype_of<double> : datatype_constant<ncclFloat64> {};
template <> struct datatype_of<__half> : datatype_constant<ncclFloat16> {};
template <> struct datatype_of<__nv_bfloat16> : datatype_constant<ncclBfloat16> {};
template <> struct datatype_of<std::byte> : datatype_constant<ncclUint8, false> {};
}  // namespace detail

/// The NCCL data type of `T` (cv-qualifiers ignored); a compile error for unsupported types.
template <class T>
inline constexpr ncclDataType_t datatype_v = detail::datatype_of<std::remove_cv_t<T>>::value;

/// Whether NCCL can reduce `T` (sum/max/min).
template <class T>
inline constexpr bool reducible_v = detail::datatype_of<std::remove_cv_t<T>>::reducible;

/// The NCCL op for `op`. Throws invalid_argument for a value outside the enum.
[[nodiscard]] constexpr ncclRedOp_t to_nccl(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::max: return ncclMax;
    case reduce_op::min: return ncclMin;
  }
  throw invalid_argument(headroom::detail::concat("nccl: reduce_op value ", static_cast<int>(op),
                                                  " is not sum, max or min"));
}

template <reduce_op Op>
inline constexpr ncclRedOp_t redop_v = to_nccl(Op);

static_assert(datatype_v<std::int8_t> == ncclInt8 && datatype_v<std::uint8_t> == ncclUint8);
static_assert(datatype_v<std::int32_t> == ncclInt32 && datatype_v<std::uint32_t const> == ncclUint32);
static_assert(datatype_v<std::int64_t> == ncclInt64 && datatype_v<std::uint64_t> == ncclUint64);
static_assert(datatype_v<long long> == ncclInt64 && datatype_v<unsigned long long> == ncclUint64);
static_assert(datatype_v<__half> == ncclFloat16 && datatype_v<__nv_bfloat16> == ncclBfloat16);
static_assert(datatype_v<float> == ncclFloat32 && datatype_v<double> == ncclFloat64);
static_assert(datatype_v<std::byte> == ncclUint8 && !reducible_v<std::byte> && reducible_v<__nv_bfloat16>);
static_assert(redop_v<reduce_op::sum> == ncclSum && redop_v<reduce_op::max> == ncclMax &&
              redop_v<reduce_op::min> == ncclMin);

}  // namespace headroom::nccl
