// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The host substrate's stream: work runs when it is issued, so there is never anything to
// wait for. It exists so that stream-ordered code runs unchanged on a CPU-only machine.
#include "headroom/core/stream.hpp"

namespace headroom::host {

class inline_stream {
 public:
  void synchronize() const noexcept {}
  friend bool operator==(inline_stream, inline_stream) noexcept = default;
};
static_assert(stream<inline_stream>);

}  // namespace headroom::host
