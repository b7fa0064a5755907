// SPDX-License-Identifier: Apache-2.0
// headroom::pipeline from Python: schedule generators, hand-written schedules, the validator,
// timelines, the memory model (per-rank peak for each output retention and output lifetime, sizes
// per virtual stage or per micro-batch) and PyTorch pipelining's action format both ways.
// python/headroom/pipeline.py is the Pythonic layer.
#include <nanobind/nanobind.h>
#include <nanobind/operators.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "headroom/pipeline/fingerprint.hpp"
#include "headroom/pipeline/memory_model.hpp"
#include "headroom/pipeline/output_lifetime.hpp"
#include "headroom/pipeline/placement.hpp"
#include "headroom/pipeline/pytorch_format.hpp"
#include "headroom/pipeline/schedules.hpp"
#include "headroom/pipeline/transfer_grouping.hpp"
#include "headroom/pipeline/timeline.hpp"
#include "headroom/pipeline/v_schedules.hpp"
#include "headroom/pipeline/validate.hpp"

namespace headroom::python {

namespace {

using namespace headroom::pipeline;

template <class T>
std::string printed(T const& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

pipeline_shape shape_of(int_arg stages, int_arg microbatches, int_arg chunks, int_arg group) {
  pipeline_shape s{as_int(stages, "stages"), as_int(microbatches, "microbatches"), as_int(chunks, "chunks"),
                   as_int(group, "group")};
  s.check("pipeline shape");
  return s;
}

// Python lists built here, each object checked: running out of memory raises MemoryError
// (nanobind's casters would let std::bad_alloc escape a noexcept frame and abort).
constexpr std::size_t max_listed_actions = std::size_t{1} << 24;
using action_pylist = nb::typed<nb::list, action>;
action_pylist action_list(std::span<action const> actions) {
  action_pylist out;
  for (auto const& a : actions) out.append(nb::cast(a));
  return out;
}

int checked_stage(pipeline_shape const& s, nb::handle h, char const* who) {
  int const st = as_int(h, "virtual_stage");
  expects(st >= 0 && st < s.virtual_stages(), who, ": virtual stage ", st, " out of range [0, ", s.virtual_stages(),
          ") for p = ", s.stages, ", v = ", s.chunks);
  return st;
}

action_kind kind_of(nb::handle h) {
  return static_cast<action_kind>(as_choice(h, "action kind",
                                            {"forward", "backward", "backward_input", "backward_weight", "send_forward",
                                             "recv_forward", "send_backward", "recv_backward", "overlapped"}));
}

std::vector<std::vector<action>> rank_lists(nb::handle h, char const* what) {
  if (!PySequence_Check(h.ptr()) || nb::isinstance<nb::str>(h))
    throw nb::type_error(
        headroom::detail::concat(what, " = ", repr_of(h), "; expected one list of Actions per rank").c_str());
  std::vector<std::vector<action>> out;
  std::size_t r = 0;
  for (nb::handle row : h) {
    auto& list = out.emplace_back();
    if (!PySequence_Check(row.ptr()) || nb::isinstance<nb::str>(row))
      throw nb::type_error(
          headroom::detail::concat(what, "[", r, "] = ", repr_of(row), "; expected a list of Actions").c_str());
    std::size_t i = 0;
    for (nb::handle a : row) {
      if (!nb::isinstance<action>(a))
        throw nb::type_error(
            headroom::detail::concat(what, "[", r, "][", i, "] = ", repr_of(a), "; expected an Action").c_str());
      list.push_back(nb::cast<action>(a));
      ++i;
    }
    ++r;
  }
  return out;
}

std::vector<std::vector<std::string>> string_rows(nb::handle h) {
  if (!PySequence_Check(h.ptr()) || nb::isinstance<nb::str>(h))
    throw nb::type_error(
        headroom::detail::concat("rows = ", repr_of(h), "; expected one list of action strings per rank").c_str());
  std::vector<std::vector<std::string>> out;
  std::size_t r = 0;
  for (nb::handle row : h) {
    auto& list = out.emplace_back();
    if (!PySequence_Check(row.ptr()) || nb::isinstance<nb::str>(row))
      throw nb::type_error(
          headroom::detail::concat("rows[", r, "] = ", repr_of(row), "; expected a list of action strings").c_str());
    for (nb::handle cell : row) {
      // PyTorch's rows hold _Action objects or None (a bubble): str() of an _Action is its text.
      list.push_back(cell.is_none() ? std::string() : std::string(nb::str(cell).c_str()));
    }
    ++r;
  }
  return out;
}

schedule generate(str_arg kind, pipeline_shape const& shape) {
  switch (as_choice(kind, "schedule kind",
                    {"gpipe", "one_f_one_b", "interleaved_1f1b", "zb_h1", "interleaved_zb", "forward_only", "zbv",
                     "dualpipe_v"})) {
    case 0:
      return make_schedule<gpipe>(shape);
    case 1:
      return make_schedule<one_f_one_b>(shape);
    case 2:
      return make_schedule<interleaved_1f1b>(shape);
    case 3:
      return make_schedule<zb_h1>(shape);
    case 4:
      return make_schedule<interleaved_zb>(shape);
    case 5:
      return make_schedule<forward_only>(shape);
    case 6:
      return make_schedule<zbv>(shape);
    default:
      return make_schedule<dualpipe_v>(shape);
  }
}

template <output_lifetime O, transfer_grouping T>
memory_plan predict(schedule const& s, model_bytes const& bytes, str_arg retention, O lifetime, T grouping) {
  switch (as_choice(retention, "retention", {"all", "reduced", "none"})) {
    case 0:
      return predict_memory(s, bytes, retention::all{}, lifetime, grouping);
    case 1:
      return predict_memory(s, bytes, retention::reduced{}, lifetime, grouping);
    default:
      return predict_memory(s, bytes, retention::none{}, lifetime, grouping);
  }
}

template <output_lifetime O>
memory_plan predict(schedule const& s, model_bytes const& bytes, str_arg retention, O lifetime, str_arg grouping) {
  if (as_choice(grouping, "transfers", {"one_by_one", "grouped"}) == 0)
    return predict(s, bytes, retention, lifetime, transfers::one_by_one{});
  return predict(s, bytes, retention, lifetime, transfers::grouped{});
}

memory_plan predict(schedule const& s, model_bytes const& bytes, str_arg retention, str_arg outputs, str_arg grouping) {
  if (as_choice(outputs, "outputs", {"freed_when_sent", "kept_until_backward"}) == 0)
    return predict(s, bytes, retention, outputs::freed_when_sent{}, grouping);
  return predict(s, bytes, retention, outputs::kept_until_backward{}, grouping);
}

/// One StageBytes per virtual stage (`what` names the list in messages).
std::vector<stage_bytes> stage_list(nb::handle h, std::string const& what) {
  if (!PySequence_Check(h.ptr()) || nb::isinstance<nb::str>(h))
    throw nb::type_error(
        headroom::detail::concat(what, " = ", repr_of(h), "; expected a list of one StageBytes per virtual stage")
            .c_str());
  std::vector<stage_bytes> v;
  std::size_t i = 0;
  for (nb::handle b : h) {
    if (!nb::isinstance<stage_bytes>(b))
      throw nb::type_error(
          headroom::detail::concat(what, "[", i, "] = ", repr_of(b), "; expected a StageBytes").c_str());
    v.push_back(nb::cast<stage_bytes>(b));
    ++i;
  }
  return v;
}

/// A StageBytes for every stage, a list of one per virtual stage, or a list of such lists, one
/// per micro-batch (packed sequences: each micro-batch its own sizes).
model_bytes model_bytes_of(schedule const& s, nb::handle h) {
  if (nb::isinstance<stage_bytes>(h)) return model_bytes::uniform(s.shape(), nb::cast<stage_bytes>(h));
  if (!PySequence_Check(h.ptr()) || nb::isinstance<nb::str>(h))
    throw nb::type_error(headroom::detail::concat("stage bytes = ", repr_of(h),
                                                  "; expected a StageBytes, a list of one per virtual stage or a list "
                                                  "of such lists, one per micro-batch")
                             .c_str());
  nb::sequence seq = nb::borrow<nb::sequence>(h);
  if (nb::len(seq) > 0 && !nb::isinstance<stage_bytes>(seq[0])) {
    std::vector<std::vector<stage_bytes>> rows;
    for (nb::handle row : seq)
      rows.push_back(stage_list(row, headroom::detail::concat("stage bytes[", rows.size(), "]")));
    return model_bytes::per_microbatch(rows);
  }
  return model_bytes(stage_list(h, "stage bytes"));
}

std::optional<pipeline_shape> optional_shape(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  return nb::cast<pipeline_shape>(h);
}
std::optional<placement> optional_placement(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  return nb::cast<placement>(h);
}
std::vector<std::vector<int>> stage_table(nb::handle h) {
  if (!PySequence_Check(h.ptr()) || nb::isinstance<nb::str>(h))
    throw nb::type_error(
        headroom::detail::concat("table = ", repr_of(h), "; expected one list of virtual stages per rank").c_str());
  std::vector<std::vector<int>> out;
  std::size_t r = 0;
  for (nb::handle row : h) {
    if (!PySequence_Check(row.ptr()) || nb::isinstance<nb::str>(row))
      throw nb::type_error(
          headroom::detail::concat("table[", r, "] = ", repr_of(row), "; expected a list of virtual stages").c_str());
    auto& list = out.emplace_back();
    for (nb::handle st : row) list.push_back(as_int(st, "virtual stage"));
    ++r;
  }
  return out;
}

pytorch::export_options export_options_of(bool send_waits, bool reduce_grad_waits, bool fsdp, int_arg max_active_stages) {
  return {.send_waits = send_waits, .reduce_grad_waits = reduce_grad_waits, .fsdp = fsdp,
          .max_active_stages = as_int(max_active_stages, "max_active_stages")};
}

}  // namespace

void bind_pipeline(nb::module_& m) {
  nb::module_ sub = m.def_submodule("pipeline", "headroom::pipeline");

  nb::class_<pipeline_shape>(sub, "Shape", "p ranks (stages), m micro-batches, v chunks per rank, group g (0: p).")
      .def(
          "__init__",
          [](pipeline_shape* self, int_arg p, int_arg mb, int_arg v, int_arg g) {
            new (self) pipeline_shape(shape_of(p, mb, v, g));
          },
          nb::arg("stages"), nb::arg("microbatches"), nb::arg("chunks") = 1, nb::arg("group") = 0)
      .def_ro("stages", &pipeline_shape::stages)
      .def_ro("microbatches", &pipeline_shape::microbatches)
      .def_ro("chunks", &pipeline_shape::chunks)
      .def_ro("group", &pipeline_shape::group)
      .def("virtual_stages", &pipeline_shape::virtual_stages)
      .def(
          "rank_of",
          [](pipeline_shape const& s, int_arg v) { return s.rank_of(checked_stage(s, v, "pipeline::Shape::rank_of")); },
          nb::arg("virtual_stage"))
      .def(
          "chunk_of",
          [](pipeline_shape const& s, int_arg v) { return s.chunk_of(checked_stage(s, v, "pipeline::Shape::chunk_of")); },
          nb::arg("virtual_stage"))
      .def(nb::self == nb::self)
      .def("__repr__", [](pipeline_shape const& s) { return "Shape(" + printed(s) + ")"; });

  nb::class_<placement>(sub, "Placement",
                        "Which rank holds each virtual stage, as which chunk: interleaved (stage s on rank s mod p, "
                        "the default), v_shape (rank r holds r and 2p - 1 - r) or a user's table.")
      .def_static(
          "interleaved", [](int_arg p, int_arg v) { return placement::interleaved(as_int(p, "stages"), as_int(v, "chunks")); },
          nb::arg("stages"), nb::arg("chunks"))
      .def_static(
          "v_shape", [](int_arg p, int_arg v) { return placement::v_shape(as_int(p, "stages"), as_int(v, "chunks")); },
          nb::arg("stages"), nb::arg("chunks") = 2)
      .def_static(
          "from_table", [](nb::handle table) { return placement::from_table(stage_table(table)); }, nb::arg("table"),
          "table[r]: the virtual stages of rank r, chunk by chunk; every stage on exactly one rank.")
      .def_prop_ro("kind", [](placement const& p) { return std::string(p.name()); })
      .def_prop_ro("ranks", &placement::ranks)
      .def_prop_ro("chunks", &placement::chunks)
      .def(
          "rank_of",
          [](placement const& p, int_arg s) {
            int const st = as_int(s, "virtual_stage");
            expects(st >= 0 && st < p.virtual_stages(), "pipeline::placement::rank_of: virtual stage ", st,
                    " out of range [0, ", p.virtual_stages(), ")");
            return p.rank_of(st);
          },
          nb::arg("virtual_stage"))
      .def(
          "chunk_of",
          [](placement const& p, int_arg s) {
            int const st = as_int(s, "virtual_stage");
            expects(st >= 0 && st < p.virtual_stages(), "pipeline::placement::chunk_of: virtual stage ", st,
                    " out of range [0, ", p.virtual_stages(), ")");
            return p.chunk_of(st);
          },
          nb::arg("virtual_stage"))
      .def(
          "virtual_stage",
          [](placement const& p, int_arg r, int_arg c) {
            int const rank = as_int(r, "rank"), chunk = as_int(c, "chunk");
            expects(rank >= 0 && rank < p.ranks() && chunk >= 0 && chunk < p.chunks(), "pipeline::placement::virtual_stage: rank ",
                    rank, " chunk ", chunk, " out of range, expected rank in [0, ", p.ranks(), ") and chunk in [0, ", p.chunks(), ")");
            return p.virtual_stage(rank, chunk);
          },
          nb::arg("rank"), nb::arg("chunk"))
      .def(nb::self == nb::self)
      .def("__repr__", [](placement const& p) { return "Placement(" + printed(p) + ")"; });

  nb::class_<action>(sub, "Action",
                     "One step of one rank: a computation or a transfer of a virtual stage; 'overlapped' runs the "
                     "forward of (microbatch, stage) with the backward of (backward_microbatch, backward_stage).")
      .def(
          "__init__",
          [](action* self, str_arg kind, int_arg microbatch, int_arg stage, int_arg peer, int_arg backward_microbatch,
             int_arg backward_stage) {
            new (self) action{kind_of(kind),        as_int(microbatch, "microbatch"),
                              as_int(stage, "stage"), as_int(peer, "peer"),
                              as_int(backward_microbatch, "backward_microbatch"), as_int(backward_stage, "backward_stage")};
          },
          nb::arg("kind"), nb::arg("microbatch"), nb::arg("stage"), nb::arg("peer") = -1, nb::kw_only(),
          nb::arg("backward_microbatch") = -1, nb::arg("backward_stage") = -1)
      .def_prop_ro("kind", [](action const& a) { return std::string(name_of(a.kind)); })
      .def_ro("microbatch", &action::microbatch)
      .def_ro("stage", &action::stage)
      .def_ro("peer", &action::peer)
      .def_ro("backward_microbatch", &action::backward_microbatch)
      .def_ro("backward_stage", &action::backward_stage)
      .def_prop_ro("is_compute", [](action const& a) { return is_compute(a.kind); })
      .def(
          "pytorch", [](action const& a) { return pytorch::to_string(a); }, "PyTorch's _Action text: '0F1'.")
      .def(nb::self == nb::self)
      .def("__str__", [](action const& a) { return printed(a); })
      .def("__repr__", [](action const& a) { return "Action(" + printed(a) + ")"; });

  nb::class_<schedule>(sub, "Schedule", "Every rank's action list for one step (validated before use).")
      .def(
          "__init__",
          [](schedule* self, std::string name, pipeline_shape const& shape,
             nb::typed<nb::handle, std::vector<std::vector<action>>> ranks, bool forward_only,
             nb::typed<nb::handle, placement> where) {
            auto const kind = forward_only ? step_kind::evaluation : step_kind::training;
            auto const pl = optional_placement(where);
            if (pl) new (self) schedule(std::move(name), shape, *pl, rank_lists(ranks, "ranks"), kind);
            else new (self) schedule(std::move(name), shape, rank_lists(ranks, "ranks"), kind);
          },
          nb::arg("name"), nb::arg("shape"), nb::arg("ranks"), nb::kw_only(), nb::arg("forward_only") = false,
          nb::arg("placement") = nb::none(),
          "forward_only: an evaluation step (forwards only; validate() refuses any gradient action). placement: "
          "where the virtual stages live (interleaved when None).")
      .def_prop_ro("name", &schedule::name)
      .def_prop_ro("shape", [](schedule const& s) { return s.shape(); })
      .def_prop_ro("placement", [](schedule const& s) { return s.placement(); })
      .def_prop_ro(
          "ranks",
          [](schedule const& s) {
            std::size_t total = 0;
            for (auto const& list : s.ranks()) total += list.size();
            expects<capacity_error>(total <= max_listed_actions, "pipeline::Schedule.ranks: ", total,
                                    " actions, expected <= ", max_listed_actions,
                                    " (2^24) as Python objects; read one rank at a time with actions(rank)");
            nb::typed<nb::list, action_pylist> out;
            for (auto const& list : s.ranks()) out.append(action_list(list));
            return out;
          })
      .def(
          "actions", [](schedule const& s, int_arg r) { return action_list(s.actions(as_int(r, "rank"))); },
          nb::arg("rank"))
      .def("splits_backward", &schedule::splits_backward)
      .def_prop_ro("forward_only", &schedule::forward_only, "An evaluation schedule: forwards only.")
      .def(nb::self == nb::self)
      .def("__str__", [](schedule const& s) { return printed(s); })
      .def("__repr__", [](schedule const& s) { return "Schedule('" + s.name() + "', " + printed(s.shape()) + ")"; });

  sub.def(
      "make_schedule",
      [](str_arg kind, int_arg p, int_arg mb, int_arg v, int_arg g) { return generate(kind, shape_of(p, mb, v, g)); },
      nb::arg("kind"), nb::arg("stages"), nb::arg("microbatches"), nb::arg("chunks") = 1, nb::arg("group") = 0,
      "gpipe, one_f_one_b, interleaved_1f1b, zb_h1, interleaved_zb, forward_only (evaluation), or on the V "
      "placement zbv or dualpipe_v (chunks = 2) for the shape.");
  sub.attr("schedule_kinds") = nb::make_tuple("gpipe", "one_f_one_b", "interleaved_1f1b", "zb_h1", "interleaved_zb",
                                              "forward_only", "zbv", "dualpipe_v");
  sub.attr("output_lifetimes") = nb::make_tuple("freed_when_sent", "kept_until_backward");
  sub.attr("transfer_groupings") = nb::make_tuple("one_by_one", "grouped");
  sub.def(
      "place_transfers",
      [](std::string name, pipeline_shape const& shape,
         nb::typed<nb::handle, std::vector<std::vector<action>>> orders, nb::typed<nb::handle, placement> where) {
        auto const pl = optional_placement(where);
        return place_transfers(std::move(name), shape, pl ? *pl : placement::interleaved(shape),
                               rank_lists(orders, "compute orders"));
      },
      nb::arg("name"), nb::arg("shape"), nb::arg("compute_orders"), nb::kw_only(), nb::arg("placement") = nb::none(),
      "A schedule from per-rank compute orders, transfers placed as the generators place theirs (stages on ranks "
      "as `placement` says, interleaved when None; two stages of one rank hand over locally).");
  sub.def("find_problem", &find_problem, nb::arg("schedule"), "The first reason the schedule cannot run, or ''.");
  sub.def(
      "validate", [](schedule const& s) { validate(s); }, nb::arg("schedule"),
      "Raises invalid_argument naming the rank, action and rule unless the schedule is valid.");
  sub.def("timeline", &timeline, nb::arg("schedule"), "The schedule as a text Gantt chart, one line per rank.");
  sub.def("ticks", &ticks, nb::arg("schedule"), "Ticks with unit-time computations (length including bubbles).");

  nb::class_<stage_bytes>(sub, "StageBytes", "What one micro-batch costs on one virtual stage, in bytes.")
      .def(
          "__init__",
          [](stage_bytes* self, int_arg activations, int_arg output, int_arg weight_stash, int_arg parameters,
             int_arg workspace, int_arg kept_for_weight, int_arg input_workspace, int_arg weight_workspace) {
            stage_bytes const b{as_size(activations, "activations"), as_size(output, "output"),
                                as_size(weight_stash, "weight_stash"), as_size(parameters, "parameters"),
                                as_size(workspace, "workspace"), as_size(kept_for_weight, "kept_for_weight"),
                                as_size(input_workspace, "input_workspace"), as_size(weight_workspace, "weight_workspace")};
            expects(b.kept_for_weight <= b.activations, "StageBytes: kept_for_weight = ", b.kept_for_weight,
                    " bytes, expected at most activations = ", b.activations, " (the part of the stash a split backward keeps)");
            new (self) stage_bytes{b};
          },
          nb::arg("activations") = 0, nb::arg("output") = 0, nb::arg("weight_stash") = 0, nb::arg("parameters") = 0,
          nb::arg("workspace") = 0, nb::arg("kept_for_weight") = 0, nb::arg("input_workspace") = 0,
          nb::arg("weight_workspace") = 0)
      .def_ro("activations", &stage_bytes::activations)
      .def_ro("output", &stage_bytes::output)
      .def_ro("weight_stash", &stage_bytes::weight_stash)
      .def_ro("parameters", &stage_bytes::parameters)
      .def_ro("workspace", &stage_bytes::workspace, "Temporaries one computation allocates and frees itself.")
      .def_ro("kept_for_weight", &stage_bytes::kept_for_weight,
              "The part of activations a split backward keeps from its input half to its weight half.")
      .def_ro("input_workspace", &stage_bytes::input_workspace,
              "Temporaries a split backward's input half allocates and frees itself.")
      .def_ro("weight_workspace", &stage_bytes::weight_workspace,
              "Temporaries a split backward's weight half allocates and frees itself.")
      .def(nb::self == nb::self)
      .def("__repr__", [](stage_bytes const& b) { return "StageBytes" + printed(b); });

  nb::class_<rank_memory>(sub, "RankMemory", "One rank's predicted bytes for one step.")
      .def_ro("rank", &rank_memory::rank)
      .def_ro("peak", &rank_memory::peak)
      .def_ro("peak_action", &rank_memory::peak_action)
      .def_ro("held_at_end", &rank_memory::held_at_end)
      .def_ro("parameters", &rank_memory::parameters)
      .def("total", &rank_memory::total)
      .def("__repr__", [](rank_memory const& r) {
        return headroom::detail::concat("RankMemory(rank=", r.rank, ", peak=", r.peak, ", held_at_end=", r.held_at_end,
                                        ", parameters=", r.parameters, ")");
      });
  nb::class_<memory_plan>(sub, "MemoryPlan", "Every rank's peak for one step of a schedule.")
      .def_prop_ro("ranks", [](memory_plan const& p) { return p.ranks(); })
      .def_prop_ro("retention", [](memory_plan const& p) { return std::string(p.retention()); })
      .def_prop_ro(
          "outputs", [](memory_plan const& p) { return std::string(p.lifetime()); },
          "The output lifetime: freed_when_sent or kept_until_backward.")
      .def_prop_ro(
          "transfers", [](memory_plan const& p) { return std::string(p.transfers()); },
          "How runs of consecutive transfers were counted: one_by_one or grouped.")
      .def_prop_ro("shape", [](memory_plan const& p) { return p.shape(); })
      .def(
          "rank", [](memory_plan const& p, int_arg r) { return p.rank(as_int(r, "rank")); }, nb::arg("rank"))
      .def("max_rank", [](memory_plan const& p) { return p.max_rank(); })
      .def("__str__", [](memory_plan const& p) { return printed(p); });
  sub.def(
      "predict_memory",
      [](schedule const& s,
         nb::typed<nb::handle,
                   std::variant<stage_bytes, std::vector<stage_bytes>, std::vector<std::vector<stage_bytes>>>>
             stages,
         str_arg retention, str_arg outputs,
         str_arg grouping) { return predict(s, model_bytes_of(s, stages), retention, outputs, grouping); },
      nb::arg("schedule"), nb::arg("stage_bytes"), nb::arg("retention") = "all", nb::arg("outputs") = "freed_when_sent",
      nb::arg("transfers") = "one_by_one",
      "Each rank's peak for one step with output retention 'all', 'reduced' or 'none', outputs freed when sent "
      "(Megatron) or kept until their backward (PyTorch's PipelineStage), runs of consecutive transfers issued "
      "'one_by_one' or 'grouped' (one batch: its receives allocated before its sends are freed); stage_bytes: one "
      "StageBytes for all stages, one per virtual stage, or one list per micro-batch.");

  sub.def(
      "fingerprint",
      [](schedule const& s,
         nb::typed<nb::handle,
                   std::variant<stage_bytes, std::vector<stage_bytes>, std::vector<std::vector<stage_bytes>>>>
             stages) {
        auto const bytes = model_bytes_of(s, stages);
        bytes.check(s.shape(), "pipeline::fingerprint");
        auto const w = fingerprint(s, bytes);
        return std::vector<std::int64_t>(w.begin(), w.end());
      },
      nb::arg("schedule"), nb::arg("stage_bytes"),
      "The words the executor all-gathers before a step: ranks holding the same schedule (shape and every rank's "
      "actions, not the name) and sizes get equal lists. Compare them across ranks before running a step.");

  nb::module_ pt = sub.def_submodule("pytorch", "PyTorch pipelining's _Action text format");
  pt.def(
      "export_actions",
      [](schedule const& s, bool compute_only, bool send_waits, bool reduce_grad_waits, bool fsdp,
         int_arg max_active_stages) {
        return pytorch::export_actions(s, compute_only ? pytorch::content::compute_only : pytorch::content::compute_comms,
                                       export_options_of(send_waits, reduce_grad_waits, fsdp, max_active_stages));
      },
      nb::arg("schedule"), nb::arg("compute_only") = false, nb::kw_only(), nb::arg("send_waits") = true,
      nb::arg("reduce_grad_waits") = true, nb::arg("fsdp") = false, nb::arg("max_active_stages") = 3,
      "One row of PyTorch _Action strings per rank. The full export (compute_only False) is what "
      "_PipelineScheduleRuntime._load_csv(format='compute_comms') runs: WAIT_SEND_F/B (send_waits), REDUCE_GRAD "
      "(+ WAIT_REDUCE_GRAD with reduce_grad_waits), UNSHARD/RESHARD with fsdp, where PyTorch's lowering puts them. "
      "Raises for a forward-only schedule (PyTorch's runtime refuses one).");
  pt.def(
      "to_csv",
      [](schedule const& s, bool compute_only, bool send_waits, bool reduce_grad_waits, bool fsdp,
         int_arg max_active_stages) {
        return pytorch::to_csv(s, compute_only ? pytorch::content::compute_only : pytorch::content::compute_comms,
                               export_options_of(send_waits, reduce_grad_waits, fsdp, max_active_stages));
      },
      nb::arg("schedule"), nb::arg("compute_only") = false, nb::kw_only(), nb::arg("send_waits") = true,
      nb::arg("reduce_grad_waits") = true, nb::arg("fsdp") = false, nb::arg("max_active_stages") = 3,
      "export_actions as the CSV text PyTorch's _dump_csv writes.");
  pt.def(
      "import_actions",
      [](nb::handle rows, std::string name, nb::typed<nb::handle, pipeline_shape> shape,
         nb::typed<nb::handle, placement> where) {
        return pytorch::import_actions(string_rows(rows), std::move(name), optional_shape(shape), optional_placement(where));
      },
      nb::arg("rows"), nb::arg("name") = "pytorch", nb::arg("shape") = nb::none(), nb::arg("placement") = nb::none());
  pt.def(
      "from_csv",
      [](std::string const& text, std::string name, nb::typed<nb::handle, pipeline_shape> shape,
         nb::typed<nb::handle, placement> where) {
        return pytorch::from_csv(text, std::move(name), optional_shape(shape), optional_placement(where));
      },
      nb::arg("text"), nb::arg("name") = "pytorch", nb::arg("shape") = nb::none(), nb::arg("placement") = nb::none());
  pt.def(
      "parse_cell", [](std::string const& text) { return pytorch::parse_cell(text).actions; }, nb::arg("text"),
      "The actions of one cell (peers unset: -1).");
}

}  // namespace headroom::python
