// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Element type tags. Pool categories default to these; communicators map them to wire types.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace headroom {

enum class dtype : std::uint8_t { u8, i8, i32, u32, i64, u64, f16, bf16, f32, f64 };

[[nodiscard]] constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::u8:
    case dtype::i8: return 1;
    case dtype::f16:
    case dtype::bf16: return 2;
    case dtype::i32:
    case dtype::u32:
    case dtype::f32: return 4;
    case dtype::i64:
    case dtype::u64:
    case dtype::f64: return 8;
  }
  return 0;
}

[[nodiscard]] constexpr std::string_view name_of(dtype t) noexcept {
  switch (t) {
    case dtype::u8: return "uint8";
    case dtype::i8: return "int8";
    case dtype::i32: return "int32";
    case dtype::u32: return "uint32";
    case dtype::i64: return "int64";
    case dtype::u64: return "uint64";
    case dtype::f16: return "float16";
    case dtype::bf16: return "bfloat16";
    case dtype::f32: return "float32";
    case dtype::f64: return "float64";
  }
  return "?";
}

/// Maps a C++ element type to its tag. Specialise for your own 16-bit types
/// (the CUDA substrate does so for __half and __nv_bfloat16).
template <class T>
struct dtype_of;  // undefined: no tag

template <> struct dtype_of<std::uint8_t> : std::integral_constant<dtype, dtype::u8> {};
template <> struct dtype_of<std::int8_t> : std::integral_constant<dtype, dtype::i8> {};
template <> struct dtype_of<std::int32_t> : std::integral_constant<dtype, dtype::i32> {};
template <> struct dtype_of<std::uint32_t> : std::integral_constant<dtype, dtype::u32> {};
template <> struct dtype_of<std::int64_t> : std::integral_constant<dtype, dtype::i64> {};
template <> struct dtype_of<std::uint64_t> : std::integral_constant<dtype, dtype::u64> {};
template <> struct dtype_of<float> : std::integral_constant<dtype, dtype::f32> {};
template <> struct dtype_of<double> : std::integral_constant<dtype, dtype::f64> {};

template <class T>
concept has_dtype = requires { dtype_of<std::remove_cv_t<T>>::value; };

template <class T>
inline constexpr dtype dtype_v = dtype_of<std::remove_cv_t<T>>::value;

}  // namespace headroom
