// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// The host substrate's event. Work on an inline_stream completes as it is issued, so a
// recorded event is ready at once; recording state is kept so that misuse (waiting on an
// event never recorded) behaves like CUDA's (a no-op) and can be tested.
#include "headroom/core/event.hpp"
#include "headroom/host/stream.hpp"

namespace headroom::host {

class inline_event {
 public:
  void record(inline_stream const&) noexcept { recorded_ = true; }
  [[nodiscard]] bool ready() const noexcept { return true; }
  void wait_on(inline_stream const&) const noexcept {}
  void synchronize() const noexcept {}
  [[nodiscard]] bool recorded() const noexcept { return recorded_; }

 private:
  bool recorded_ = false;
};
static_assert(event<inline_event, inline_stream>);

}  // namespace headroom::host
