// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// A stream is a cheap, copyable view of an ordered queue of work (a CUDA stream, or the
// host's inline stream where work runs as it is issued).
#include <concepts>

namespace headroom {

template <class S>
concept stream = std::copyable<S> && std::equality_comparable<S> && requires(S const& s) {
  s.synchronize();  // host waits for all work issued so far
};

}  // namespace headroom
