// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"

using namespace headroom;

TEST_CASE("align_up rounds to a power of two") {
  CHECK(align_up(0, 256) == 0);
  CHECK(align_up(1, 256) == 256);
  CHECK(align_up(256, 256) == 256);
  CHECK(align_up(257, 256) == 512);
  CHECK(align_up(13, 1) == 13);
  CHECK(align_up(SIZE_MAX - 255, 256) == SIZE_MAX - 255);
}

TEST_CASE("align_up rejects a bad alignment and overflow") {
  CHECK_THROWS_AS((void)align_up(10, 0), invalid_argument);
  CHECK_THROWS_AS((void)align_up(10, 3), invalid_argument);
  CHECK_THROWS_WITH_AS((void)align_up(10, 48), doctest::Contains("48"), invalid_argument);
  CHECK_THROWS_AS((void)align_up(SIZE_MAX - 254, 256), capacity_error);
  CHECK_THROWS_AS((void)align_up(SIZE_MAX, 2), capacity_error);
  // capacity_error and invalid_argument are both headroom errors.
  CHECK_THROWS_AS((void)align_up(SIZE_MAX, 2), error);
}

TEST_CASE("round_up rounds to any positive multiple") {
  CHECK(round_up(0, 3) == 0);
  CHECK(round_up(1, 3) == 3);
  CHECK(round_up(6, 3) == 6);
  CHECK(round_up(7, 3) == 9);
  CHECK(round_up(1000, 1000) == 1000);
  CHECK_THROWS_WITH_AS((void)round_up(7, 0), doctest::Contains("positive"), invalid_argument);
  // Near the top the rounded value wrapped to a small number before.
  CHECK(round_up(SIZE_MAX - 2, 3) == SIZE_MAX);  // SIZE_MAX is a multiple of 3: the top itself
  CHECK_THROWS_WITH_AS((void)round_up(SIZE_MAX - 1, 4), doctest::Contains("18446744073709551614 overflows"), capacity_error);
  CHECK(round_up(SIZE_MAX - 3, 4) == SIZE_MAX - 3);
}

TEST_CASE("checked_mul: exact products, capacity_error naming both operands on overflow") {
  CHECK(checked_mul(std::size_t{1} << 31, std::size_t{1} << 32, "x") == std::size_t{1} << 63);
  CHECK(checked_mul(std::int64_t{-3}, std::int64_t{4}, "x") == -12);
  CHECK_THROWS_WITH_AS((void)checked_mul(std::size_t{1} << 32, std::size_t{1} << 32, "buffer bytes"),
                       doctest::Contains("buffer bytes: 4294967296 x 4294967296 overflows 64-bit unsigned"), capacity_error);
  CHECK_THROWS_WITH_AS((void)checked_mul(std::int64_t{1} << 32, std::int64_t{1} << 31, "rows x width"),
                       doctest::Contains("rows x width: 4294967296 x 2147483648 overflows 64-bit signed"), capacity_error);
}

TEST_CASE("is_power_of_two") {
  CHECK_FALSE(is_power_of_two(0));
  CHECK(is_power_of_two(1));
  CHECK(is_power_of_two(4096));
  CHECK_FALSE(is_power_of_two(48));
  static_assert(is_power_of_two(default_alignment));
}

TEST_CASE("format_bytes picks a binary unit") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(MiB) == "1.00 MiB");
  CHECK(format_bytes(3 * GiB / 2) == "1.50 GiB");
  CHECK(format_bytes(std::uint64_t{5} << 40) == "5.00 TiB");
  CHECK(format_bytes(std::uint64_t{2048} << 40) == "2048.00 TiB");  // no unit above TiB
}
