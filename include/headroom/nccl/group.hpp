// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// RAII NCCL group: operations issued between construction and end() are fused and launched
// together (needed to issue a send and a recv to the same peer without deadlock, or to drive
// several GPUs from one thread).
#include <nccl.h>

#include "headroom/nccl/check.hpp"

namespace headroom::nccl {

class group {
 public:
  group() { HEADROOM_NCCL_TRY(ncclGroupStart()); }
  group(group const&) = delete;
  group& operator=(group const&) = delete;
  /// Ends the group if end() was not called (errors are reported to stderr, not thrown).
  /// Note: operations issued before an exception left the scope are launched then; NCCL has
  /// no way to cancel them.
  ~group() {
    if (open_) HEADROOM_NCCL_TRY_NOTHROW(ncclGroupEnd());
  }
  /// Launches the group; throws nccl_error on failure. Call it once.
  void end() {
    if (!open_) return;
    open_ = false;
    HEADROOM_NCCL_TRY(ncclGroupEnd());
  }
  [[nodiscard]] bool open() const noexcept { return open_; }

 private:
  bool open_ = true;
};

}  // namespace headroom::nccl
