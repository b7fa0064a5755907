// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading a fuzzer's bytes as typed choices, and failing loudly when an invariant breaks.
// Shared by every target in tests/fuzz/ (libFuzzer binaries and the corpus replay tests).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

namespace fuzz {

/// Consumes the input front to back; once it is exhausted every read returns zero, so any
/// prefix of an input is itself a valid input (what libFuzzer's mutations expect).
class input {
 public:
  input(std::uint8_t const* data, std::size_t size) noexcept : data_(data), size_(size) {}

  [[nodiscard]] bool empty() const noexcept { return pos_ >= size_; }

  template <class T>
    requires std::is_integral_v<T>
  [[nodiscard]] T take() noexcept {
    using U = std::make_unsigned_t<T>;
    U u = 0;
    for (std::size_t i = 0; i < sizeof(T) && pos_ < size_; ++i) u = static_cast<U>(u | (U{data_[pos_++]} << (8 * i)));
    return static_cast<T>(u);
  }
  [[nodiscard]] bool flag() noexcept { return (take<std::uint8_t>() & 1U) != 0; }
  /// A value in [lo, hi] (both inclusive); hi >= lo.
  template <class T>
    requires std::is_integral_v<T>
  [[nodiscard]] T in(T lo, T hi) noexcept {
    using U = std::make_unsigned_t<T>;
    U const span = static_cast<U>(static_cast<U>(hi) - static_cast<U>(lo));
    U const v = take<U>();
    if (span == std::numeric_limits<U>::max()) return static_cast<T>(v);
    return static_cast<T>(static_cast<U>(lo) + static_cast<U>(v % static_cast<U>(span + 1)));
  }
  [[nodiscard]] double take_double() noexcept {
    auto const bits = take<std::uint64_t>();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }

 private:
  std::uint8_t const* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// An invariant failed: print it and abort, which libFuzzer records as a crash with the input.
[[noreturn]] inline void violated(char const* file, int line, char const* what) noexcept {
  std::fprintf(stderr, "\nfuzz invariant violated at %s:%d: %s\n", file, line, what);
  std::abort();
}

}  // namespace fuzz

// Variadic so that a condition may contain template argument commas.
#define FUZZ_CHECK(...)                                                 \
  do {                                                                  \
    if (!(__VA_ARGS__)) ::fuzz::violated(__FILE__, __LINE__, #__VA_ARGS__); \
  } while (false)
