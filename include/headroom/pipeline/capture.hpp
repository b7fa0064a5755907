// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// capture_scope: the executor's contract for CUDA graph capture, on its buffer_arena
// (buffer_arena.hpp), checked instead of remembered.
//
//   exec.step(stage, r);                       // once eagerly (NCCL connects, slots settle)
//   pipeline::capture_scope scope(arena);      // no planned buffer held, no step running
//   exec.step(stage, r);                       // captured: every buffer at its planned offset
//   scope.end();                               // throws unless every buffer was released
//
// While open: the arena's pool is under a pool::capture_scope (release events cleared on entry
// and exit; a buffer acquired before may not be released inside), and every request must be a
// planned buffer of a step: a request outside a step (which would go to the upstream: an
// allocation) throws logic_error. Opening requires the arena idle: no step running and no planned
// buffer held (an output kept from an earlier step under retention::all: drop the result first).
// end() requires every buffer of the captured steps released (so retention::all, whose outputs
// outlive the step, cannot be captured unless the caller drops them inside the scope), and
// closes the scope either way. A scope destroyed without end() closes without checking. The
// CUDA stream capture around it is pipeline/cuda/capture.hpp.
#include "headroom/core/error.hpp"
#include "headroom/pipeline/buffer_arena.hpp"
#include "headroom/pool/capture.hpp"

namespace headroom::pipeline {

template <class Arena>
class capture_scope {
 public:
  explicit capture_scope(Arena& arena) : arena_(&idle(arena)), scope_(arena.pool()) { arena.capturing_ = true; }
  capture_scope(capture_scope const&) = delete;
  capture_scope& operator=(capture_scope const&) = delete;
  ~capture_scope() {
    if (arena_ != nullptr) arena_->capturing_ = false;
  }

  /// Closes the scope; throws logic_error (after closing) naming the buffers still held.
  void end() {
    expects<logic_error>(arena_ != nullptr, "pipeline::capture_scope::end: the scope is closed already");
    arena_->capturing_ = false;
    arena_ = nullptr;
    scope_.end();
  }
  [[nodiscard]] bool open() const noexcept { return arena_ != nullptr; }

 private:
  static Arena& idle(Arena& a) {
    expects<logic_error>(!a.in_step(), "pipeline::capture_scope: a step is running; open the scope between steps");
    expects<logic_error>(a.live() == 0, "pipeline::capture_scope: ", a.live(),
                         " planned buffer(s) still held (outputs kept from an earlier step?); drop them before "
                         "capturing, a captured step must find its buffers free");
    return a;
  }
  Arena* arena_;
  pool::capture_scope<typename Arena::pool_type> scope_;
};

}  // namespace headroom::pipeline
