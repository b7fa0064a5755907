// SPDX-License-Identifier: Apache-2.0
#pragma once
// throws_with(f, needle): CHECKs that f() throws E (headroom::invalid_argument unless told) with
// a message that contains `needle`. A function rather than CHECK_THROWS_WITH_AS, because the calls
// under test take braced lists whose commas a macro would split.
#include <doctest/doctest.h>

#include <string>

#include "headroom/core/error.hpp"

namespace headroom_test {

template <class E = headroom::invalid_argument, class F>
void throws_with(F&& f, std::string const& needle) {
  try {
    f();
  } catch (E const& e) {
    std::string const what = e.what();
    INFO(what);
    CHECK(what.find(needle) != std::string::npos);
    return;
  }
  FAIL("expected an exception containing: " << needle);
}

}  // namespace headroom_test
