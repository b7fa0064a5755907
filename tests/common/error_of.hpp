// SPDX-License-Identifier: Apache-2.0
#pragma once
// Catching what a call throws, for tests of bad input: the message of an expected error type,
// or a marker when the call returned or threw something else. Host-only (no CUDA).
#include <string>
#include <string_view>

#include "headroom/core/error.hpp"

namespace headroom_test {

/// What `f()` threw as `E`; "<no exception>" when it returned normally (any other exception
/// propagates, so a wrong error type fails the test loudly).
template <class E = headroom::error, class F>
[[nodiscard]] std::string error_of(F&& f) {
  try {
    f();
  } catch (E const& e) {
    return e.what();
  }
  return "<no exception>";
}

/// True when `f()` throws an `E` (by default any headroom::error).
template <class E = headroom::error, class F>
[[nodiscard]] bool throws(F&& f) {
  return error_of<E>(static_cast<F&&>(f)) != "<no exception>";
}

[[nodiscard]] inline bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

}  // namespace headroom_test
