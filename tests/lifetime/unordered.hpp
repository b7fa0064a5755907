// SPDX-License-Identifier: Apache-2.0
#pragma once
// A release policy that frees without ordering: what a missing wait looks like. The lifetime
// tests run their race scenarios with it as the control that shows a premature free is caught.
#include <string_view>
#include <vector>

#include "headroom/lifetime/policy.hpp"

namespace lifetime_test {

struct unordered {
  static constexpr std::string_view name = "unordered";
  template <class R, class S, class E>
  static void release(R& r, S const& owner, headroom::lifetime::block b,
                      std::vector<headroom::lifetime::stream_use<S, E>>& uses) {
    r.deallocate(owner, b.pointer, b.bytes, b.alignment);
    uses.clear();
  }
};

}  // namespace lifetime_test
