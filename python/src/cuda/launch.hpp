// SPDX-License-Identifier: Apache-2.0
#pragma once
// headroom._cuda's launches: the cp::cuda kernels for one rank's partition of a packed batch
// (headroom._core.cp.Partition, the any_partition of common/cp_partition.hpp, and for pad_split
// its cp::padding, headroom._core.cp.Padding), the device copy of the boundaries the kernels
// read, raw device pointers with row counts and a row width in elements, an element size and a
// stream handle. Nothing is kept between calls, so this module links no libtorch and serves
// every torch version; headroom._torch_ops launches through the same functions.
//
// launch.cu holds them (compiled by nvcc). This header names no CUDA type, so module.cpp
// (nanobind) is compiled by the host compiler. Every argument is checked before a launch: the
// element size and the boundaries' entry width here, the rest by cp::cuda (device boundaries
// against the partition, shapes, overlap), each an invalid_argument naming the call.
#include <cstdint>
#include <span>

#include "common/cp_partition.hpp"
#include "headroom/cp/padding.hpp"

namespace headroom::python::cuda_ext {

/// A device copy of cu_seqlens held by the caller (not owned): `size` entries of `index_bytes`
/// bytes (4: int32, 8: int64).
struct device_boundaries {
  std::uintptr_t data = 0;
  std::int64_t size = 0;
  int index_bytes = 8;
};

/// A contiguous [rows, width] device matrix of `elem_bytes`-byte elements.
struct device_matrix {
  std::uintptr_t data;
  std::int64_t rows;
  std::int64_t width;
};

// One launch each, ordered on `stream`: global -> this rank's rows, and back (zeros elsewhere).
void split(any_partition const& p, device_boundaries cu, device_matrix in, device_matrix out, int elem_bytes,
           std::uintptr_t stream);
void split_adjoint(any_partition const& p, device_boundaries cu, device_matrix in, device_matrix out, int elem_bytes,
                   std::uintptr_t stream);
// Rank-major (an all-gather's output) <-> sequence order; every rank's rows.
void to_sequence_order(any_partition const& p, device_boundaries cu, device_matrix in, device_matrix out,
                       int elem_bytes, std::uintptr_t stream);
void to_rank_order(any_partition const& p, device_boundaries cu, device_matrix in, device_matrix out, int elem_bytes,
                   std::uintptr_t stream);
/// split(pad(raw)): `p` built from pd's padded boundaries, `raw_cu` the caller's raw boundaries
/// (pd.raw_sequences() + 1 entries), `cu` the padded ones; pads (and with shift 1 every row past
/// a sequence's last real token) are `pad_value`, one element of `elem_bytes` bytes.
void pad_split(cp::padding const& pd, any_partition const& p, device_boundaries raw_cu, device_boundaries cu,
               device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream,
               std::span<unsigned char const> pad_value, std::int64_t shift);
/// in: rows [local0, local0 + block) of ranks rank0, ... in rank-major order -> their rows of out;
/// `spread`: one tile per block, so that a collective running beside gets SMs as blocks retire.
void place(any_partition const& p, device_boundaries cu, device_matrix in, device_matrix out, int elem_bytes,
           std::uintptr_t stream, int rank0, std::int64_t local0, std::int64_t block, bool spread);

/// Whether `stream` is capturing a CUDA graph (cudaStreamIsCapturing).
bool capturing(std::uintptr_t stream);

}  // namespace headroom::python::cuda_ext
