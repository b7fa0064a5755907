// SPDX-License-Identifier: Apache-2.0
// headroom._cuda's launches (cp::cuda ops), dispatched on element size, the device boundaries'
// entry width and the layout. Elements are opaque bytes here (a row is `width` elements of
// `elem_bytes`): the kernels move rows, so one instantiation per size serves every dtype of that
// size.
#include <cstring>

#include "common/element.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cp/cuda/ops.cuh"
#include "launch.hpp"

namespace headroom::python::cuda_ext {

namespace {

/// f(cp::cuda::device_cu<int32 or int64>) for `cu`; invalid_argument naming `op` and `what` for
/// any other entry width. Its size and pointer are checked by the cp::cuda op.
template <class F>
void with_device_cu(device_boundaries cu, char const* op, char const* what, F&& f) {
  expects(cu.index_bytes == 4 || cu.index_bytes == 8, op, ": ", what, " entries of ", cu.index_bytes,
          " bytes, expected int32 (4) or int64 (8)");
  if (cu.index_bytes == 4)
    f(cp::cuda::device_cu<std::int32_t>{reinterpret_cast<std::int32_t const*>(cu.data), cu.size});
  else
    f(cp::cuda::device_cu<std::int64_t>{reinterpret_cast<std::int64_t const*>(cu.data), cu.size});
}

template <class T>
cp::matrix_view<T const> in_view(device_matrix m) {
  return {reinterpret_cast<T const*>(m.data), m.rows, m.width};
}
template <class T>
cp::matrix_view<T> out_view(device_matrix m) {
  return {reinterpret_cast<T*>(m.data), m.rows, m.width};
}

headroom::cuda::stream_view stream_of(std::uintptr_t s) { return {reinterpret_cast<cudaStream_t>(s)}; }

/// One launch of a partition-only op: `launch(partition, device_cu, in, out, stream)`.
template <class Launch>
void launch_rows(any_partition const& ap, char const* op, device_boundaries cu, device_matrix in, device_matrix out,
                 int elem_bytes, std::uintptr_t stream, Launch&& launch) {
  with_element(elem_bytes, op, [&](auto e) {
    using T = decltype(e);
    with_device_cu(cu, op, "cu_seqlens", [&](auto dcu) {
      ap.visit([&](auto const& p) { launch(p, dcu, in_view<T>(in), out_view<T>(out), stream_of(stream)); });
    });
  });
}

}  // namespace

// split, split_adjoint, to_sequence_order, to_rank_order: cp::cuda's op of the same name.
#define HEADROOM_PY_ROWS_OP(name)                                                                                 \
  void name(any_partition const& p, device_boundaries cu, device_matrix in, device_matrix out, int elem_bytes,   \
            std::uintptr_t stream) {                                                                            \
    launch_rows(p, "headroom._cuda." #name, cu, in, out, elem_bytes, stream,                                    \
                [](auto const& part, auto dcu, auto i, auto o, auto s) { cp::cuda::name(part, dcu, i, o, s); }); \
  }
HEADROOM_PY_ROWS_OP(split)
HEADROOM_PY_ROWS_OP(split_adjoint)
HEADROOM_PY_ROWS_OP(to_sequence_order)
HEADROOM_PY_ROWS_OP(to_rank_order)
#undef HEADROOM_PY_ROWS_OP

bool capturing(std::uintptr_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  HEADROOM_CUDA_TRY(cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}

void place(any_partition const& p, device_boundaries cu, device_matrix in, device_matrix out, int elem_bytes,
           std::uintptr_t stream, int rank0, std::int64_t local0, std::int64_t block, bool spread) {
  auto const shape = spread ? cp::cuda::detail::grid_shape::one_tile_per_block : cp::cuda::detail::grid_shape::resident;
  launch_rows(p, "headroom._cuda.place", cu, in, out, elem_bytes, stream,
              [&](auto const& part, auto dcu, auto i, auto o, auto s) {
                cp::cuda::place_rank_major(part, dcu, i, rank0, local0, block, o, s, shape);
              });
}

void pad_split(cp::padding const& pd, any_partition const& p, device_boundaries raw_cu, device_boundaries cu,
               device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream,
               std::span<unsigned char const> pad_value, std::int64_t shift) {
  char const* op = "headroom._cuda.pad_split";
  expects(static_cast<std::int64_t>(pad_value.size()) == elem_bytes, op, ": pad value of ", pad_value.size(),
          " bytes, expected one element of ", elem_bytes, " bytes");
  with_element(elem_bytes, op, [&](auto e) {
    using T = decltype(e);
    T pad;
    std::memcpy(&pad, pad_value.data(), sizeof(T));
    with_device_cu(raw_cu, op, "raw cu_seqlens", [&](auto raw) {
      with_device_cu(cu, op, "cu_seqlens", [&](auto padded) {
        p.visit([&](auto const& part) {
          cp::cuda::pad_split(pd, part, raw, padded, in_view<T>(in), out_view<T>(out), pad, stream_of(stream), shift);
        });
      });
    });
  });
}

}  // namespace headroom::python::cuda_ext
