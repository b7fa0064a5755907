// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// An event marks a point in a stream. Other streams can wait for it without the host blocking.
#include "headroom/core/stream.hpp"

namespace headroom {

template <class E, class S>
concept event = stream<S> && requires(E& e, E const& ce, S const& s) {
  e.record(s);                              // mark the current end of s
  { ce.ready() } -> std::convertible_to<bool>;  // host poll: has the marked work completed?
  ce.wait_on(s);                            // s waits (device-side) for the marked work
  ce.synchronize();                         // host waits for the marked work
};

}  // namespace headroom
