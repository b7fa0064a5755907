// SPDX-License-Identifier: Apache-2.0
// headroom._cuda: the cp kernels called with raw device pointers, shapes, an element size and a
// stream handle (ints). No libtorch and no at::Tensor: one build serves every torch version
// (headroom.torch.cp wraps it in torch custom ops). The CUDA runtime is linked statically and
// nothing touches a device at import, so the module imports on machines without a GPU.
//
// Errors are headroom::error subclasses, raised as headroom._core's classes (see the module
// init), so `except headroom.invalid_argument` catches errors from either module.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "plan.hpp"

namespace nb = nanobind;
using headroom::python::cuda_ext::plan;

namespace {

std::span<std::int64_t const> as_span(std::vector<std::int64_t> const& v) { return {v.data(), v.size()}; }

}  // namespace

NB_MODULE(_cuda, m) {
  // No "nanobind: leaked N instances" at exit: torch's dispatcher keeps the Python functions that
  // headroom.torch registers as custom ops (and through their globals every plan and partition the
  // module caches) until the process ends, after nanobind's check; those are not leaks.
  nb::set_leak_warnings(false);
  m.doc() = "headroom's CUDA kernels by raw pointer and stream (cp split / gather reorder / pad_split), no libtorch";
  // headroom::error and its subclasses become headroom._core's classes through the translators
  // _core registered: nanobind keeps translators in its internals, shared by every module built
  // with the same nanobind ABI, so an exception thrown here is matched by them. Importing _core
  // makes sure they are registered (it fails only while stubs are generated from the build tree).
  try {
    nb::module_::import_("headroom._core");
  } catch (nb::python_error const&) {  // holds (and drops) the ImportError: nothing is raised
  }

  nb::class_<plan>(m, "Plan",
                   "One CP rank's plan for a packed batch: the partition of its padded cu_seqlens (and the padding, "
                   "when built from raw cu_seqlens). Built once per batch; every launch reuses it.")
      .def(
          "__init__",
          [](plan* self, std::vector<std::int64_t> const& padded_cu, int cp_size, int cp_rank, std::string_view layout) {
            new (self) plan(as_span(padded_cu), cp_size, cp_rank, layout);
          },
          nb::arg("padded_cu_seqlens"), nb::arg("cp_size"), nb::arg("cp_rank"), nb::arg("layout") = "dual_chunk")
      .def_static(
          "from_raw",
          [](std::vector<std::int64_t> const& raw_cu, int cp_size, int cp_rank, std::string_view layout, int tp,
             std::int64_t extra, std::int64_t total_multiple) {
            return plan::from_raw(as_span(raw_cu), cp_size, cp_rank, layout, tp, extra, total_multiple);
          },
          nb::arg("raw_cu_seqlens"), nb::arg("cp_size"), nb::arg("cp_rank"), nb::arg("layout") = "dual_chunk",
          nb::arg("tp") = 1, nb::arg("extra") = 1, nb::arg("total_multiple") = 1)
      .def("for_rank", &plan::for_rank, nb::arg("rank"))
      .def_prop_ro("cp_size", &plan::cp_size)
      .def_prop_ro("cp_rank", &plan::cp_rank)
      .def_prop_ro("layout", [](plan const& p) { return std::string(p.layout()); })
      .def_prop_ro("sequences", &plan::sequences)
      .def_prop_ro("global_rows", &plan::global_rows)
      .def_prop_ro("local_rows", &plan::local_rows)
      .def_prop_ro("has_padding", &plan::has_padding)
      .def_prop_ro("raw_rows", &plan::raw_rows)
      .def_prop_ro("raw_sequences", &plan::raw_sequences)
      .def_prop_ro("padded_cu_seqlens", &plan::padded_cu_seqlens)
      .def_prop_ro("local_cu_seqlens", &plan::local_cu_seqlens)
      .def_prop_ro("raw_cu_seqlens", &plan::raw_cu_seqlens)
      .def(
          "set_device_cu",
          [](plan& p, std::uintptr_t data, std::int64_t size, int index_bytes) { p.set_device_cu({data, size, index_bytes}); },
          nb::arg("data"), nb::arg("size"), nb::arg("index_bytes"))
      .def(
          "set_device_raw_cu",
          [](plan& p, std::uintptr_t data, std::int64_t size, int index_bytes) {
            p.set_device_raw_cu({data, size, index_bytes});
          },
          nb::arg("data"), nb::arg("size"), nb::arg("index_bytes"))
#define HEADROOM_PY_ROWS_OP(name)                                                                                   \
  .def(                                                                                                             \
      #name,                                                                                                        \
      [](plan const& p, std::uintptr_t in, std::int64_t in_rows, std::uintptr_t out, std::int64_t out_rows,         \
         std::int64_t width, int elem_bytes, std::uintptr_t stream) {                                               \
        p.name({in, in_rows, width}, {out, out_rows, width}, elem_bytes, stream);                                   \
      },                                                                                                            \
      nb::arg("input"), nb::arg("input_rows"), nb::arg("output"), nb::arg("output_rows"), nb::arg("width"),         \
      nb::arg("elem_bytes"), nb::arg("stream"))
      HEADROOM_PY_ROWS_OP(split)
      HEADROOM_PY_ROWS_OP(split_adjoint)
      HEADROOM_PY_ROWS_OP(to_sequence_order)
      HEADROOM_PY_ROWS_OP(to_rank_order)
#undef HEADROOM_PY_ROWS_OP
      .def(
          "pad_split",
          [](plan const& p, std::uintptr_t in, std::int64_t in_rows, std::uintptr_t out, std::int64_t out_rows,
             std::int64_t width, int elem_bytes, nb::bytes pad_value, std::int64_t shift, std::uintptr_t stream) {
            std::span<unsigned char const> pad(static_cast<unsigned char const*>(pad_value.data()), pad_value.size());
            p.pad_split({in, in_rows, width}, {out, out_rows, width}, elem_bytes, pad, shift, stream);
          },
          nb::arg("input"), nb::arg("input_rows"), nb::arg("output"), nb::arg("output_rows"), nb::arg("width"),
          nb::arg("elem_bytes"), nb::arg("pad_value"), nb::arg("shift"), nb::arg("stream"))
      .def(
          "place",
          [](plan const& p, std::uintptr_t in, std::int64_t in_rows, std::uintptr_t out, std::int64_t out_rows,
             std::int64_t width, int elem_bytes, int rank0, std::int64_t local0, std::int64_t block, bool spread,
             std::uintptr_t stream) {
            p.place({in, in_rows, width}, {out, out_rows, width}, elem_bytes, rank0, local0, block, spread, stream);
          },
          nb::arg("input"), nb::arg("input_rows"), nb::arg("output"), nb::arg("output_rows"), nb::arg("width"),
          nb::arg("elem_bytes"), nb::arg("rank0"), nb::arg("local0"), nb::arg("block"), nb::arg("spread"),
          nb::arg("stream"),
          "Rank-major rows [local0, local0 + block) of ranks rank0, ... (input_rows / block ranks) to their "
          "sequence positions in output; no other row written")
      .def("__repr__", &plan::describe);
}
