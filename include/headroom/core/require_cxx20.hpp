// SPDX-License-Identifier: Apache-2.0
#pragma once
// headroom is C++20. Included first by every headroom header, so that a translation unit compiled
// as C++17 (the default of many CUDA code bases, and of nvcc without -std) stops here with one
// message naming the flag, instead of a thousand errors from the concepts further down.
// MSVC reports 199711L in __cplusplus unless /Zc:__cplusplus is given; _MSVC_LANG is its dialect.
#if (defined(_MSVC_LANG) ? _MSVC_LANG : __cplusplus) < 202002L
#error "headroom needs C++20: compile with -std=c++20 (nvcc: -std=c++20, MSVC: /std:c++20). Under CMake, linking headroom::core asks for it, and a CMAKE_CXX_STANDARD or CMAKE_CUDA_STANDARD below 20 with _REQUIRED ON, or -std=c++17 in the flags, overrides it."
// A missing include is a fatal error in every compiler: nothing after this line is parsed.
#include <headroom: compilation stopped by the C++20 check above>
#endif
