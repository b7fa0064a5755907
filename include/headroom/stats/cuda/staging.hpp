// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// blocking_device_staging: runs the reducers' one collective on a communicator whose buffers
// must be device memory (headroom::nccl::communicator), through a small workspace the caller
// provides (query its size first, allocate it once, reuse it every step):
//
//   auto const plan  = stats::reduce_plan(64);
//   auto const bytes = stats::cuda::blocking_device_staging::workspace_bytes(plan, comm.size());
//   stats::workspace ws(cuda::async_resource::device_default(dev), stream.view(), bytes);
//   stats::reducer<stats::cuda::blocking_device_staging> reduce(plan, stats::cuda::blocking_device_staging(ws.bytes()));
//   auto peak = reduce.max(report, comm, stream.view());
//
// Per call: one host-to-device copy of the packed words, the collective, one device-to-host
// copy, all on the given stream; then the host waits for that stream (hence "blocking": the
// result is a host report). An optional pinned host buffer of the same size makes the two
// copies truly asynchronous DMA instead of the driver's pageable staging.
//
// Per call nothing is allocated (no cudaMalloc / cudaMallocHost between collectives); the only
// wait is the host's on `s`. Allocate the workspaces once, outside the collective sequence
// (see stats/workspace.hpp).
//
// The workspace size is checked on each rank before anything is enqueued; every rank derives
// it from the same plan, so all ranks pass or all fail that check together.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/stats/plan.hpp"

namespace headroom::stats::cuda {

template <class C>
concept device_buffer_communicator = communicator<C> && std::same_as<typename C::stream_type, headroom::cuda::stream_view>;

class blocking_device_staging {
 public:
  /// Bytes of device workspace (and of the optional pinned host buffer) for `plan` on `ranks` ranks.
  [[nodiscard]] static std::size_t workspace_bytes(reduce_plan const& plan, int ranks) {
    std::size_t const words = std::max(2 * plan.max_words(), plan.gather_words_per_rank() + plan.gather_words(ranks));
    return words * sizeof(std::int64_t);
  }

  /// `device_workspace`: device memory of at least workspace_bytes(plan, ranks), 8-byte aligned.
  /// `pinned_host`: empty, or page-locked host memory of the same size.
  explicit blocking_device_staging(std::span<std::byte> device_workspace, std::span<std::byte> pinned_host = {})
      : device_(device_workspace), pinned_(pinned_host) {
    expects(reinterpret_cast<std::uintptr_t>(device_.data()) % alignof(std::int64_t) == 0,
            "stats::cuda::blocking_device_staging: device workspace ", static_cast<void const*>(device_.data()),
            " is not 8-byte aligned");
    expects(pinned_.empty() || pinned_.size() >= device_.size(), "stats::cuda::blocking_device_staging: pinned host buffer of ",
            pinned_.size(), " bytes is smaller than the device workspace (", device_.size(), " bytes)");
  }

  template <device_buffer_communicator C>
  void all_reduce_max(C& comm, std::span<std::int64_t const> in, std::span<std::int64_t> out,
                      headroom::cuda::stream_view s) {
    auto [d_in, d_out] = carve(in.size(), out.size(), "all_reduce_max");
    upload(d_in, in, s);
    comm.all_reduce(std::span<std::int64_t const>(d_in, in.size()), std::span<std::int64_t>(d_out, out.size()),
                    reduce_op::max, s);
    download(out, d_out, in.size(), s);
  }

  template <device_buffer_communicator C>
  void all_gather(C& comm, std::span<std::int64_t const> in, std::span<std::int64_t> out, headroom::cuda::stream_view s) {
    auto [d_in, d_out] = carve(in.size(), out.size(), "all_gather");
    upload(d_in, in, s);
    comm.all_gather(std::span<std::int64_t const>(d_in, in.size()), std::span<std::int64_t>(d_out, out.size()), s);
    download(out, d_out, in.size(), s);
  }

  [[nodiscard]] std::span<std::byte> device_workspace() const noexcept { return device_; }
  [[nodiscard]] bool uses_pinned_host() const noexcept { return !pinned_.empty(); }

 private:
  struct buffers {
    std::int64_t* in;
    std::int64_t* out;
  };

  [[nodiscard]] buffers carve(std::size_t in_words, std::size_t out_words, char const* what) const {
    std::size_t const need = (in_words + out_words) * sizeof(std::int64_t);
    expects(need <= device_.size(), "stats::cuda::blocking_device_staging::", what, ": needs ", need,
            " bytes of device workspace, got ", device_.size(), "; size it with workspace_bytes(plan, ranks)");
    auto* base = reinterpret_cast<std::int64_t*>(device_.data());
    return {base, base + in_words};
  }
  [[nodiscard]] std::int64_t* pinned_words() const noexcept { return reinterpret_cast<std::int64_t*>(pinned_.data()); }

  void upload(std::int64_t* d_in, std::span<std::int64_t const> in, headroom::cuda::stream_view s) const {
    std::int64_t const* src = in.data();
    if (!pinned_.empty()) {
      std::memcpy(pinned_words(), in.data(), in.size_bytes());  // the previous call synchronised: free to reuse
      src = pinned_words();
    }
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(d_in, src, in.size_bytes(), cudaMemcpyHostToDevice, s.get()));
  }
  void download(std::span<std::int64_t> out, std::int64_t const* d_out, std::size_t in_words,
                headroom::cuda::stream_view s) const {
    std::int64_t* dst = pinned_.empty() ? out.data() : pinned_words() + in_words;
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(dst, d_out, out.size_bytes(), cudaMemcpyDeviceToHost, s.get()));
    s.synchronize();
    if (!pinned_.empty()) std::memcpy(out.data(), dst, out.size_bytes());
  }

  std::span<std::byte> device_;
  std::span<std::byte> pinned_;
};

}  // namespace headroom::stats::cuda
