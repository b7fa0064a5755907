// SPDX-License-Identifier: Apache-2.0
#pragma once
// headroom_test::sanitized(): true in a build under AddressSanitizer or ThreadSanitizer (g++ or
// clang++). Property grids then run a sample of their shapes: instrumented code runs several
// times slower, and a sample reaches the same code paths the sanitizers watch.
namespace headroom_test {

constexpr bool sanitized() {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

}  // namespace headroom_test
