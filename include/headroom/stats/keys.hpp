// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Key names. Where a headroom statistic means the same as one of torch.cuda.memory_stats(),
// it has the same name, so dashboards built on PyTorch's keys keep working.
//
//   allocated_bytes.all.{current,peak,allocated,freed}   bytes handed out to callers
//   reserved_bytes.all.{current,peak}                    bytes held from the device/driver
//   allocation.all.{current,peak,allocated,freed}        number of live / ever-made allocations
//   num_alloc_retries, num_ooms                          failed allocations (torch semantics)
//
// Names without a torch equivalent say what they are: device_memory.{free,total,used}_bytes
// (cudaMemGetInfo; torch.cuda.mem_get_info) for the whole device, all processes included.
#include <cstdint>
#include <string_view>

#include "headroom/stats/report.hpp"

namespace headroom::stats::keys {

inline constexpr std::string_view allocated_bytes_current = "allocated_bytes.all.current";
inline constexpr std::string_view allocated_bytes_peak = "allocated_bytes.all.peak";
inline constexpr std::string_view allocated_bytes_allocated = "allocated_bytes.all.allocated";
inline constexpr std::string_view allocated_bytes_freed = "allocated_bytes.all.freed";
inline constexpr std::string_view reserved_bytes_current = "reserved_bytes.all.current";
inline constexpr std::string_view reserved_bytes_peak = "reserved_bytes.all.peak";
inline constexpr std::string_view allocation_current = "allocation.all.current";
inline constexpr std::string_view allocation_peak = "allocation.all.peak";
inline constexpr std::string_view allocation_allocated = "allocation.all.allocated";
inline constexpr std::string_view allocation_freed = "allocation.all.freed";
inline constexpr std::string_view num_alloc_retries = "num_alloc_retries";
inline constexpr std::string_view num_ooms = "num_ooms";
inline constexpr std::string_view device_free_bytes = "device_memory.free_bytes";
inline constexpr std::string_view device_total_bytes = "device_memory.total_bytes";
inline constexpr std::string_view device_used_bytes = "device_memory.used_bytes";

}  // namespace headroom::stats::keys

namespace headroom::stats {

/// What a statistics_resource reports: the allocator-side keys of torch.cuda.memory_stats().
using allocator_report = report<field<"allocated_bytes.all.current", std::int64_t>,
                                field<"allocated_bytes.all.peak", std::int64_t>,
                                field<"allocated_bytes.all.allocated", std::int64_t>,
                                field<"allocated_bytes.all.freed", std::int64_t>,
                                field<"allocation.all.current", std::int64_t>,
                                field<"allocation.all.peak", std::int64_t>,
                                field<"allocation.all.allocated", std::int64_t>,
                                field<"allocation.all.freed", std::int64_t>,
                                field<"num_ooms", std::int64_t>>;

/// The keys training dashboards log most (Megatron-Bridge's report_memory, torchtitan's
/// DeviceMemStats), as a typed report.
using memory_report = report<field<"allocated_bytes.all.current", std::int64_t>,
                             field<"allocated_bytes.all.peak", std::int64_t>,
                             field<"reserved_bytes.all.current", std::int64_t>,
                             field<"reserved_bytes.all.peak", std::int64_t>,
                             field<"num_alloc_retries", std::int64_t>,
                             field<"num_ooms", std::int64_t>>;

}  // namespace headroom::stats
