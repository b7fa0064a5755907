// SPDX-License-Identifier: Apache-2.0
#pragma once
// Stand-ins for what an engine already has before it meets headroom: a caching allocator with a
// malloc/free interface and a byte budget, a process group with a C-style collective API (an
// element-type enum and void pointers, as wrappers of NCCL, Gloo or oneCCL have), and a
// parameter table. docs/integrate.md's skeletons (tests/integrate/skeletons.cpp) adapt them to
// headroom's concepts. The process group runs on headroom's thread ranks so that the skeletons
// are tested on a CPU-only machine; a real engine's would call its library instead.
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/host/thread_group.hpp"

namespace my_engine {

/// The engine's allocator: nullptr when the budget is spent, counts what it holds.
class allocator {
 public:
  explicit allocator(std::size_t budget) noexcept : budget_(budget) {}
  [[nodiscard]] void* malloc(std::size_t bytes, std::size_t alignment) {
    if (bytes > budget_ - held_) return nullptr;
    held_ += bytes;
    ++allocations_;
    return ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t{alignment});
  }
  void free(void* p, std::size_t bytes, std::size_t alignment) noexcept {
    held_ -= bytes;
    ::operator delete(p, std::align_val_t{alignment});
  }
  [[nodiscard]] std::size_t held() const noexcept { return held_; }
  [[nodiscard]] std::size_t budget() const noexcept { return budget_; }
  [[nodiscard]] std::size_t allocations() const noexcept { return allocations_; }

 private:
  std::size_t budget_;
  std::size_t held_ = 0;
  std::size_t allocations_ = 0;
};

enum class dtype : std::uint8_t { u8, i32, i64, bf16, f32, f64 };
enum class op : std::uint8_t { sum, max, min };

/// The engine's process group: untyped buffers, counts in elements.
class process_group {
 public:
  explicit process_group(headroom::host::thread_communicator& ranks) noexcept : ranks_(&ranks) {}
  [[nodiscard]] int rank() const noexcept { return ranks_->rank(); }
  [[nodiscard]] int size() const noexcept { return ranks_->size(); }
  void barrier() { ranks_->barrier(); }
  void abort(char const* why) noexcept { ranks_->abort(why); }
  void allreduce(void const* in, void* out, std::size_t count, dtype t, op o) {
    typed<reducing>(t, [&]<class T>(T*) { ranks_->all_reduce(view<T const>(in, count), view<T>(out, count), reduce_op_of(o)); });
  }
  void allgather(void const* in, void* out, std::size_t count, dtype t) {
    typed(t, [&]<class T>(T*) { ranks_->all_gather(view<T const>(in, count), view<T>(out, count * n())); });
  }
  void reducescatter(void const* in, void* out, std::size_t count, dtype t, op o) {
    typed<reducing>(t, [&]<class T>(T*) {
      ranks_->reduce_scatter(view<T const>(in, count * n()), view<T>(out, count), reduce_op_of(o));
    });
  }
  void bcast(void* buffer, std::size_t count, dtype t, int root) {
    typed(t, [&]<class T>(T*) { ranks_->broadcast(view<T>(buffer, count), root); });
  }
  void send(void const* buffer, std::size_t count, dtype t, int peer) {
    typed(t, [&]<class T>(T*) { ranks_->send(view<T const>(buffer, count), peer); });
  }
  void recv(void* buffer, std::size_t count, dtype t, int peer) {
    typed(t, [&]<class T>(T*) { ranks_->recv(view<T>(buffer, count), peer); });
  }

 private:
  [[nodiscard]] std::size_t n() const noexcept { return static_cast<std::size_t>(size()); }
  template <class T, class P>
  static std::span<T> view(P* p, std::size_t count) {
    return {static_cast<T*>(p), count};
  }
  static headroom::reduce_op reduce_op_of(op o) {
    return o == op::sum ? headroom::reduce_op::sum : o == op::max ? headroom::reduce_op::max : headroom::reduce_op::min;
  }
  static constexpr bool reducing = true;
  template <bool Reduce = false, class F>
  static void typed(dtype t, F&& f) {
    switch (t) {
      case dtype::u8:
        if constexpr (!Reduce) return f(static_cast<std::byte*>(nullptr));
        break;
      case dtype::i32: return f(static_cast<std::int32_t*>(nullptr));
      case dtype::i64: return f(static_cast<std::int64_t*>(nullptr));
      case dtype::f32: return f(static_cast<float*>(nullptr));
      case dtype::f64: return f(static_cast<double*>(nullptr));
      case dtype::bf16: break;
    }
    throw headroom::invalid_argument("my_engine::process_group: dtype " + std::to_string(static_cast<int>(t)) +
                                     (Reduce ? " cannot be reduced" : " is not supported by this stand-in"));
  }
  headroom::host::thread_communicator* ranks_;
};

/// One row of the engine's parameter table.
struct parameter {
  std::string name;
  std::vector<std::int64_t> shape;
  dtype type;
  int fsdp_unit;  ///< index of its FSDP unit; -1: outside every unit (embedding, output layer)
};

}  // namespace my_engine
