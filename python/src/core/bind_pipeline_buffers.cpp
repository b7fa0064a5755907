// SPDX-License-Identifier: Apache-2.0
// headroom::pipeline::plan_buffers from Python: every buffer one rank's step needs, at fixed
// offsets in one arena (buffer_plan.hpp), so a torch user can size static receive buffers from it.
// Registered into the pipeline submodule that pipeline.cpp creates.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "headroom/pipeline/buffer_plan.hpp"

namespace headroom::python {

namespace {

using namespace headroom::pipeline;
using sizes_arg = std::variant<stage_bytes, std::vector<stage_bytes>, std::vector<std::vector<stage_bytes>>>;

model_bytes bytes_of(schedule const& s, sizes_arg const& sizes) {
  if (auto const* one = std::get_if<stage_bytes>(&sizes)) return model_bytes::uniform(s.shape(), *one);
  if (auto const* list = std::get_if<std::vector<stage_bytes>>(&sizes)) return model_bytes(*list);
  return model_bytes::per_microbatch(std::get<std::vector<std::vector<stage_bytes>>>(sizes));
}

template <class R, class O>
buffer_plan plan(schedule const& s, model_bytes const& b, str_arg transfers, buffer_plan_options const& o) {
  if (as_choice(transfers, "transfers", {"one_by_one", "grouped"}) == 0)
    return plan_buffers(s, b, R{}, O{}, transfers::one_by_one{}, o);
  return plan_buffers(s, b, R{}, O{}, transfers::grouped{}, o);
}
template <class R>
buffer_plan plan(schedule const& s, model_bytes const& b, str_arg outputs, str_arg transfers, buffer_plan_options const& o) {
  if (as_choice(outputs, "outputs", {"freed_when_sent", "kept_until_backward"}) == 0)
    return plan<R, outputs::freed_when_sent>(s, b, transfers, o);
  return plan<R, outputs::kept_until_backward>(s, b, transfers, o);
}

}  // namespace

void bind_pipeline_buffers(nb::module_& m) {
  nb::module_ sub = nb::borrow<nb::module_>(m.attr("pipeline"));
  nb::class_<planned_buffer>(sub, "PlannedBuffer", "One buffer of a rank's step at its fixed offset.")
      .def_prop_ro("role", [](planned_buffer const& b) { return std::string(name_of(b.role)); })
      .def_ro("microbatch", &planned_buffer::microbatch)
      .def_ro("stage", &planned_buffer::stage)
      .def_ro("bytes", &planned_buffer::bytes)
      .def_ro("offset", &planned_buffer::offset)
      .def_ro("allocated_at", &planned_buffer::allocated_at)
      .def_ro("released_at", &planned_buffer::released_at)
      .def_ro("held_at_end", &planned_buffer::held_at_end)
      .def("__repr__", [](planned_buffer const& b) { return headroom::detail::concat("PlannedBuffer(", b, ")"); });
  nb::class_<rank_buffers>(sub, "RankBuffers", "One rank's buffers, arena and bound.")
      .def_ro("rank", &rank_buffers::rank)
      .def_ro("buffers", &rank_buffers::buffers)
      .def_ro("points", &rank_buffers::points)
      .def_ro("arena_bytes", &rank_buffers::arena_bytes)
      .def_ro("bound", &rank_buffers::bound)
      .def_ro("peak", &rank_buffers::peak)
      .def_ro("method", &rank_buffers::method)
      .def_ro("optimal", &rank_buffers::optimal)
      .def_ro("receive_slots_separate", &rank_buffers::receive_slots_separate)
      .def_ro("receive_slots_shared", &rank_buffers::receive_slots_shared)
      .def("__repr__", [](rank_buffers const& r) {
        return headroom::detail::concat("RankBuffers(rank=", r.rank, ", buffers=", r.buffers.size(), ", arena_bytes=",
                                        r.arena_bytes, ", bound=", r.bound, ", peak=", r.peak, ")");
      });
  nb::class_<buffer_plan>(sub, "BufferPlan", "Every rank's buffers for one step, at fixed offsets.")
      .def_prop_ro("ranks", [](buffer_plan const& p) { return p.ranks(); })
      .def_prop_ro("retention", [](buffer_plan const& p) { return std::string(p.retention()); })
      .def_prop_ro("outputs", [](buffer_plan const& p) { return std::string(p.lifetime()); })
      .def_prop_ro("transfers", [](buffer_plan const& p) { return std::string(p.transfers()); })
      .def_prop_ro("alignment", &buffer_plan::alignment)
      .def(
          "rank", [](buffer_plan const& p, int_arg r) { return p.rank(as_int(r, "rank")); }, nb::arg("rank"))
      .def("__str__", [](buffer_plan const& p) {
        std::ostringstream os;
        os << p;
        return os.str();
      });
  sub.def(
      "plan_buffers",
      [](schedule const& s, nb::typed<nb::handle, sizes_arg> sizes, str_arg retention, str_arg outputs,
         str_arg transfers, int_arg alignment) {
        buffer_plan_options o;
        o.alignment = as_size(alignment, "alignment");
        model_bytes const b = bytes_of(s, nb::cast<sizes_arg>(sizes));
        switch (as_choice(retention, "retention", {"all", "reduced", "none"})) {
          case 0: return plan<retention::all>(s, b, outputs, transfers, o);
          case 1: return plan<retention::reduced>(s, b, outputs, transfers, o);
          default: return plan<retention::none>(s, b, outputs, transfers, o);
        }
      },
      nb::arg("schedule"), nb::arg("sizes"), nb::arg("retention") = "reduced", nb::arg("outputs") = "freed_when_sent",
      nb::arg("transfers") = "one_by_one", nb::arg("alignment") = 256,
      "Every buffer each rank's step needs (received activations and gradients, outputs, stashes, what the "
      "retention keeps) at fixed offsets in one arena per rank, planned on the memory model's lifetimes: "
      "arena_bytes, the bound (most bytes live at once), the memory model's peak, and the receive slots with one "
      "pool per (stage, direction) or per rank. sizes: one StageBytes for all stages, one per virtual stage, or "
      "one list per micro-batch.");
}

}  // namespace headroom::python
