// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// CUDA sources of memory statistics, as typed reports:
//   device_memory(device)   cudaMemGetInfo: the whole device, every process and allocator
//                           included (torch.cuda.mem_get_info). Free bytes reduce by MIN: the
//                           rank closest to OOM is the one that matters.
//   mem_pool_stats(pool)    cudaMemPool_t attributes, under torch's key names:
//                             reserved_bytes.all.{current,peak}  = ReservedMem{Current,High}
//                             allocated_bytes.all.{current,peak} = UsedMem{Current,High}
//   reset_mem_pool_peaks    new logging window for a pool (the High marks restart from current)
// A statistics_resource (statistics_resource.hpp) over cuda::async_resource, device_resource or
// a pool gives the allocator-side counts; stats::join() puts reports side by side.
#include <cuda_runtime_api.h>

#include <concepts>
#include <cstdint>
#include <limits>

#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/stats/report.hpp"

namespace headroom::stats::cuda {

using device_memory_report = report<field<"device_memory.free_bytes", std::int64_t, minimum>,
                                    field<"device_memory.total_bytes", std::int64_t>,
                                    field<"device_memory.used_bytes", std::int64_t>>;

using mem_pool_report = report<field<"reserved_bytes.all.current", std::int64_t>,
                               field<"reserved_bytes.all.peak", std::int64_t>,
                               field<"allocated_bytes.all.current", std::int64_t>,
                               field<"allocated_bytes.all.peak", std::int64_t>>;

namespace detail {
[[nodiscard]] inline std::int64_t to_int64(std::uint64_t v, char const* what) {
  expects<error>(v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), what, ": ", v,
                 " bytes do not fit in int64");
  return static_cast<std::int64_t>(v);
}
[[nodiscard]] inline std::int64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t v = 0;  // these attributes are cuuint64_t
  HEADROOM_CUDA_TRY(cudaMemPoolGetAttribute(pool, attr, &v));
  return to_int64(v, "stats::cuda::mem_pool_stats");
}
}  // namespace detail

/// cudaMemGetInfo on `device` (made current for the call, then restored).
[[nodiscard]] inline device_memory_report device_memory(int device) {
  headroom::cuda::scoped_device on(device);
  std::size_t free = 0;
  std::size_t total = 0;
  HEADROOM_CUDA_TRY(cudaMemGetInfo(&free, &total));
  return device_memory_report(detail::to_int64(free, "stats::cuda::device_memory"),
                              detail::to_int64(total, "stats::cuda::device_memory"),
                              detail::to_int64(total - free, "stats::cuda::device_memory"));
}

/// The pool's reserved / used counters, current and high-water.
[[nodiscard]] inline mem_pool_report mem_pool_stats(cudaMemPool_t pool) {
  expects(pool != nullptr, "stats::cuda::mem_pool_stats: null cudaMemPool_t");
  return mem_pool_report(detail::pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent),
                         detail::pool_attribute(pool, cudaMemPoolAttrReservedMemHigh),
                         detail::pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent),
                         detail::pool_attribute(pool, cudaMemPoolAttrUsedMemHigh));
}
/// For anything that exposes its pool (cuda::async_resource).
template <class R>
  requires requires(R const& r) {
    { r.pool() } -> std::convertible_to<cudaMemPool_t>;
  }
[[nodiscard]] mem_pool_report mem_pool_stats(R const& resource) {
  return mem_pool_stats(static_cast<cudaMemPool_t>(resource.pool()));
}

/// Starts a new window: both high-water marks restart from the current values.
inline void reset_mem_pool_peaks(cudaMemPool_t pool) {
  expects(pool != nullptr, "stats::cuda::reset_mem_pool_peaks: null cudaMemPool_t");
  std::uint64_t zero = 0;  // the driver accepts only 0: "reset to current"
  HEADROOM_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  HEADROOM_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
}

}  // namespace headroom::stats::cuda
