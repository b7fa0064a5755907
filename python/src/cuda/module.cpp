// SPDX-License-Identifier: Apache-2.0
// headroom._cuda: the cp kernels called by name with headroom._core's objects (cp.Partition,
// cp.Padding), the device copy of the boundaries as (pointer, entries, bytes per entry), raw
// device pointers, shapes, an element size and a stream handle (ints). No libtorch and no
// at::Tensor: one build serves every torch version (headroom.torch.cp wraps it in torch custom
// ops). The CUDA runtime is linked shared (see CMakeLists.txt) and nothing touches a device at
// import, so the module imports on machines without a GPU.
//
// The objects are _core's: nanobind keeps its type registry in internals shared by every module
// built with the same nanobind ABI, so a C++ type bound by _core (any_partition,
// cp::padding) is converted here too, and errors are headroom::error subclasses raised as
// _core's classes, so `except headroom.invalid_argument` catches errors from either module.
#include <nanobind/nanobind.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <span>
#include <tuple>

#include "launch.hpp"

namespace nb = nanobind;
namespace ce = headroom::python::cuda_ext;
using headroom::python::any_partition;

namespace {

/// Device boundaries as Python passes them: (pointer, entries, bytes per entry).
using boundaries_arg = std::tuple<std::uintptr_t, std::int64_t, int>;

ce::device_boundaries boundaries(boundaries_arg const& b) {
  return {std::get<0>(b), std::get<1>(b), std::get<2>(b)};
}

/// split, split_adjoint, to_sequence_order, to_rank_order: one signature.
using rows_op = void (*)(any_partition const&, ce::device_boundaries, ce::device_matrix, ce::device_matrix, int,
                         std::uintptr_t);

template <rows_op Op>
void def_rows_op(nb::module_& m, char const* name, char const* doc) {
  m.def(
      name,
      [](any_partition const& p, boundaries_arg const& cu, std::uintptr_t in, std::int64_t in_rows, std::uintptr_t out,
         std::int64_t out_rows, std::int64_t width, int elem_bytes, std::uintptr_t stream) {
        Op(p, boundaries(cu), {in, in_rows, width}, {out, out_rows, width}, elem_bytes, stream);
      },
      nb::arg("partition"), nb::arg("cu_seqlens"), nb::arg("input"), nb::arg("input_rows"), nb::arg("output"),
      nb::arg("output_rows"), nb::arg("width"), nb::arg("elem_bytes"), nb::arg("stream"), doc);
}

}  // namespace

NB_MODULE(_cuda, m) {
  // No "nanobind: leaked N instances" at exit: torch's dispatcher keeps the Python functions that
  // headroom.torch registers as custom ops (and through their globals every partition the module
  // caches) until the process ends, after nanobind's check; those are not leaks.
  nb::set_leak_warnings(false);
  m.doc() = "headroom's CUDA kernels by raw pointer and stream (cp split / gather reorder / pad_split), no libtorch. "
            "Each takes a headroom._core.cp.Partition and its padded cu_seqlens on the device as (pointer, entries, "
            "bytes per entry: 4 or 8).";
  // _core registers the Partition and Padding types and the error translators this module relies on.
  nb::module_::import_("headroom._core");

  def_rows_op<&ce::split>(m, "split", "Global rows -> this rank's rows (input_rows = global_rows).");
  def_rows_op<&ce::split_adjoint>(m, "split_adjoint",
                                  "This rank's rows -> their global positions, zeros elsewhere.");
  def_rows_op<&ce::to_sequence_order>(m, "to_sequence_order",
                                      "Rank-major rows (an all-gather's output) -> sequence order.");
  def_rows_op<&ce::to_rank_order>(m, "to_rank_order", "Sequence order -> rank-major rows.");
  m.def(
      "pad_split",
      [](headroom::cp::padding const& pd, any_partition const& p, boundaries_arg const& raw_cu,
         boundaries_arg const& cu, std::uintptr_t in, std::int64_t in_rows, std::uintptr_t out, std::int64_t out_rows,
         std::int64_t width, int elem_bytes, std::uintptr_t stream, nb::bytes pad_value, std::int64_t shift) {
        std::span<unsigned char const> pad(static_cast<unsigned char const*>(pad_value.data()), pad_value.size());
        ce::pad_split(pd, p, boundaries(raw_cu), boundaries(cu), {in, in_rows, width}, {out, out_rows, width},
                      elem_bytes, stream, pad, shift);
      },
      nb::arg("padding"), nb::arg("partition"), nb::arg("raw_cu_seqlens"), nb::arg("cu_seqlens"), nb::arg("input"),
      nb::arg("input_rows"), nb::arg("output"), nb::arg("output_rows"), nb::arg("width"), nb::arg("elem_bytes"),
      nb::arg("stream"), nb::arg("pad_value"), nb::arg("shift"),
      "Raw rows (input_rows = padding.raw_rows) -> this rank's padded rows, pads pad_value (one element's bytes); "
      "shift 1: each row's next token in its sequence. The partition is built from padding.padded_cu_seqlens; "
      "raw_cu_seqlens are the caller's raw boundaries (padding.raw_sequences + 1 entries).");
  m.def(
      "place",
      [](any_partition const& p, boundaries_arg const& cu, std::uintptr_t in, std::int64_t in_rows, std::uintptr_t out,
         std::int64_t out_rows, std::int64_t width, int elem_bytes, std::uintptr_t stream, int rank0,
         std::int64_t local0, std::int64_t block, bool spread) {
        ce::place(p, boundaries(cu), {in, in_rows, width}, {out, out_rows, width}, elem_bytes, stream, rank0, local0,
                  block, spread);
      },
      nb::arg("partition"), nb::arg("cu_seqlens"), nb::arg("input"), nb::arg("input_rows"), nb::arg("output"),
      nb::arg("output_rows"), nb::arg("width"), nb::arg("elem_bytes"), nb::arg("stream"), nb::arg("rank0"),
      nb::arg("local0"), nb::arg("block"), nb::arg("spread"),
      "Rank-major rows [local0, local0 + block) of ranks rank0, ... (input_rows / block ranks) to their "
      "sequence positions in output; no other row written. spread: one tile per block (a collective running "
      "beside gets SMs as blocks retire).");
}
