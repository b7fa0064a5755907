// SPDX-License-Identifier: Apache-2.0
#pragma once
// headroom._cuda's one object: a CP plan for one packed batch (partition, and the padding when
// built from raw boundaries), made once per batch on the host and reused by every op. The
// kernels take raw device pointers, row counts, a row width in elements, an element size and a
// stream handle, so this module links no libtorch and serves every torch version.
//
// plan.cpp holds the host half (validation, sizes); launch.cu the kernel launches. The index
// plans for CPU tensors are headroom._core.cp's, whose Partition is the same any_partition
// (common/cp_partition.hpp). This header names no CUDA type, so module.cpp (nanobind) is
// compiled by the host compiler.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/cp_partition.hpp"
#include "headroom/cp/padding.hpp"

namespace headroom::python::cuda_ext {

/// Device boundaries set by the caller (a tensor it keeps alive); not owned.
struct device_boundaries {
  std::uintptr_t data = 0;
  std::int64_t size = 0;
  int index_bytes = 8;  // int64 or int32 entries
};

/// A contiguous [rows, width] device matrix of `elem_bytes`-byte elements.
struct device_matrix {
  std::uintptr_t data;
  std::int64_t rows;
  std::int64_t width;
};

class plan {
 public:
  /// From global padded boundaries (split, adjoint, gather's reorder).
  plan(std::span<std::int64_t const> padded_cu, int cp_size, int cp_rank, std::string_view layout);
  /// From raw boundaries: pads every sequence to the layout's alignment (times tp and `extra`)
  /// and the total to `total_multiple` (AReaL's micro-batch padding); adds pad_split.
  static plan from_raw(std::span<std::int64_t const> raw_cu, int cp_size, int cp_rank, std::string_view layout, int tp,
                       std::int64_t extra, std::int64_t total_multiple);

  /// The same batch for another rank, without device boundaries (call set_device_cu on it).
  [[nodiscard]] plan for_rank(int rank) const;

  [[nodiscard]] int cp_size() const;
  [[nodiscard]] int cp_rank() const;
  [[nodiscard]] std::string_view layout() const;
  [[nodiscard]] std::int64_t sequences() const;
  [[nodiscard]] std::int64_t global_rows() const;
  [[nodiscard]] std::int64_t local_rows() const;
  [[nodiscard]] bool has_padding() const noexcept { return padding_.has_value(); }
  [[nodiscard]] std::int64_t raw_rows() const;
  [[nodiscard]] std::int64_t raw_sequences() const;
  [[nodiscard]] std::vector<std::int64_t> padded_cu_seqlens() const;
  [[nodiscard]] std::vector<std::int64_t> local_cu_seqlens() const;
  [[nodiscard]] std::vector<std::int64_t> raw_cu_seqlens() const;  // the caller's raw boundaries
  [[nodiscard]] std::string describe() const;

  // Device boundaries, set once per batch (before the first launch).
  void set_device_cu(device_boundaries cu);
  void set_device_raw_cu(device_boundaries cu);

  // Kernel launches (launch.cu), one each, stream-ordered; shapes checked against the plan.
  void split(device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream) const;
  void split_adjoint(device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream) const;
  void to_sequence_order(device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream) const;
  void to_rank_order(device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream) const;
  void pad_split(device_matrix in, device_matrix out, int elem_bytes, std::span<unsigned char const> pad_value,
                 std::int64_t shift, std::uintptr_t stream) const;
  /// in: rows [local0, local0 + block) of ranks rank0, ... in rank-major order -> their rows of out;
  /// `spread`: one tile per block, so that a collective running beside gets SMs as blocks retire.
  void place(device_matrix in, device_matrix out, int elem_bytes, int rank0, std::int64_t local0, std::int64_t block,
             bool spread, std::uintptr_t stream) const;

  [[nodiscard]] any_partition const& partition() const noexcept { return partition_; }
  [[nodiscard]] cp::padding const& padding(char const* op) const;
  [[nodiscard]] device_boundaries device_cu(char const* op) const;
  [[nodiscard]] device_boundaries device_raw_cu(char const* op) const;

 private:
  plan(any_partition p, std::optional<cp::padding> pd) : partition_(std::move(p)), padding_(std::move(pd)) {}

  any_partition partition_;
  std::optional<cp::padding> padding_;
  device_boundaries device_cu_{};
  device_boundaries device_raw_cu_{};
};

/// Element sizes the launches take (every torch dtype's itemsize).
inline constexpr int max_elem_bytes = 16;

}  // namespace headroom::python::cuda_ext
