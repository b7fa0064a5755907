// SPDX-License-Identifier: Apache-2.0
// headroom._cuda plan: the kernel launches (cp::cuda ops), dispatched on element size, the
// device boundaries' index type and the layout. Elements are opaque bytes here (a row is
// `width` elements of `elem_bytes`): the kernels move rows, so one instantiation per size
// serves every dtype of that size.
#include <cstring>

#include "common/element.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cp/cuda/ops.cuh"
#include "plan.hpp"

namespace headroom::python::cuda_ext {

namespace {

template <class F>
void with_device_cu(device_boundaries cu, F&& f) {
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
void launch_rows(plan const& pl, char const* op, device_matrix in, device_matrix out, int elem_bytes,
                 std::uintptr_t stream, Launch&& launch) {
  with_element(elem_bytes, op, [&](auto e) {
    using T = decltype(e);
    with_device_cu(pl.device_cu(op), [&](auto cu) {
      pl.partition().visit([&](auto const& p) { launch(p, cu, in_view<T>(in), out_view<T>(out), stream_of(stream)); });
    });
  });
}

}  // namespace

void plan::split(device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream) const {
  launch_rows(*this, "headroom._cuda.Plan.split", in, out, elem_bytes, stream,
              [](auto const& p, auto cu, auto i, auto o, auto s) { cp::cuda::split(p, cu, i, o, s); });
}
void plan::split_adjoint(device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream) const {
  launch_rows(*this, "headroom._cuda.Plan.split_adjoint", in, out, elem_bytes, stream,
              [](auto const& p, auto cu, auto i, auto o, auto s) { cp::cuda::split_adjoint(p, cu, i, o, s); });
}
void plan::to_sequence_order(device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream) const {
  launch_rows(*this, "headroom._cuda.Plan.to_sequence_order", in, out, elem_bytes, stream,
              [](auto const& p, auto cu, auto i, auto o, auto s) { cp::cuda::to_sequence_order(p, cu, i, o, s); });
}
void plan::to_rank_order(device_matrix in, device_matrix out, int elem_bytes, std::uintptr_t stream) const {
  launch_rows(*this, "headroom._cuda.Plan.to_rank_order", in, out, elem_bytes, stream,
              [](auto const& p, auto cu, auto i, auto o, auto s) { cp::cuda::to_rank_order(p, cu, i, o, s); });
}

void plan::place(device_matrix in, device_matrix out, int elem_bytes, int rank0, std::int64_t local0,
                 std::int64_t block, bool spread, std::uintptr_t stream) const {
  auto const shape = spread ? cp::cuda::detail::grid_shape::one_tile_per_block : cp::cuda::detail::grid_shape::resident;
  launch_rows(*this, "headroom._cuda.Plan.place", in, out, elem_bytes, stream,
              [&](auto const& p, auto cu, auto i, auto o, auto s) {
                cp::cuda::place_rank_major(p, cu, i, rank0, local0, block, o, s, shape);
              });
}

void plan::pad_split(device_matrix in, device_matrix out, int elem_bytes, std::span<unsigned char const> pad_value,
                     std::int64_t shift, std::uintptr_t stream) const {
  char const* op = "headroom._cuda.Plan.pad_split";
  auto const& pd = padding(op);
  expects(static_cast<std::int64_t>(pad_value.size()) == elem_bytes, op, ": pad value of ", pad_value.size(),
          " bytes, expected one element of ", elem_bytes, " bytes");
  with_element(elem_bytes, op, [&](auto e) {
    using T = decltype(e);
    T pad;
    std::memcpy(&pad, pad_value.data(), sizeof(T));
    with_device_cu(device_raw_cu(op), [&](auto raw_cu) {
      with_device_cu(device_cu(op), [&](auto padded_cu) {
        partition().visit([&](auto const& p) {
          cp::cuda::pad_split(pd, p, raw_cu, padded_cu, in_view<T>(in), out_view<T>(out), pad, stream_of(stream), shift);
        });
      });
    });
  });
}

}  // namespace headroom::python::cuda_ext
