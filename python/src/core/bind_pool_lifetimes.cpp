// SPDX-License-Identifier: Apache-2.0
// headroom::pool's lifetime planning from Python: lease traces (recorded, written and read as the
// versioned text format), plan_lifetimes and learning_arena, their planner names, and the modelled
// Megatron-FSDP step over an adapter's buckets (models.record_fsdp_step). python/headroom/pool.py
// re-exports them as LeaseTrace, LifetimePlan, plan_lifetimes, LearningArena, lifetime_planners.
#include <nanobind/nanobind.h>
#include <nanobind/operators.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "headroom/pool/fsdp_trace.hpp"
#include "headroom/pool/learning_arena.hpp"
#include "headroom/pool/lease_trace.hpp"
#include "headroom/pool/lifetime_plan.hpp"

namespace headroom::python {

namespace {

using namespace headroom::pool;

trace_bucket bucket_of(nb::handle id, nb::handle unit, nb::handle group, nb::handle dtype, nb::handle nbytes) {
  if (!nb::isinstance<nb::str>(dtype))
    throw nb::type_error(headroom::detail::concat("dtype = ", repr_of(dtype), "; expected a str such as 'bfloat16'")
                             .c_str());
  return {as_u64(id, "bucket"), unit.is_none() ? no_trace_unit : as_u64(unit, "unit"), as_u64(group, "group"),
          nb::cast<std::string>(dtype), as_u64(nbytes, "nbytes")};
}

nb::dict candidates_of(lifetime_plan const& p) {
  nb::dict d;
  for (auto const& c : p.candidates) d[c.name.c_str()] = c.arena_bytes;
  return d;
}

nb::dict stats_of(learning_arena_stats const& s) {
  nb::dict d, f;
  for (std::size_t r = 0; r < fallback_reason_names.size(); ++r)
    f[std::string(fallback_reason_names[r]).c_str()] = s.fallbacks[r];
  d["planner"] = s.planner;
  d["learning"] = s.learning;
  d["winner"] = s.winner;
  d["arena_bytes"] = s.arena_bytes;
  d["bound"] = s.bound;
  d["megatron_max_bytes"] = s.megatron_max_bytes;
  d["steps"] = s.steps;
  d["recorded_steps"] = s.recorded_steps;
  d["events"] = s.events;
  d["max_events"] = s.max_events;
  d["acquires"] = s.acquires;
  d["served"] = s.served;
  d["fallbacks"] = f;
  d["unpooled"] = s.unpooled;
  d["replans"] = s.replans;
  return d;
}

/// A sequence of (bucket, bytes) pairs; `what` names it in messages.
std::vector<models::fsdp_request> requests_of(nb::handle h, std::string const& what) {
  if (!PySequence_Check(h.ptr()) || nb::isinstance<nb::str>(h))
    throw nb::type_error(
        headroom::detail::concat(what, " = ", repr_of(h), "; expected a list of (bucket, bytes) pairs").c_str());
  std::vector<models::fsdp_request> out;
  std::size_t i = 0;
  for (nb::handle q : h) {
    auto const at = headroom::detail::concat(what, "[", i++, "]");
    if (!PySequence_Check(q.ptr()) || nb::isinstance<nb::str>(q) || PySequence_Size(q.ptr()) != 2)
      throw nb::type_error(
          headroom::detail::concat(at, " = ", repr_of(q), "; expected a (bucket, bytes) pair").c_str());
    out.push_back({as_u64(q[0], at + " bucket"), as_u64(q[1], at + " bytes")});
  }
  return out;
}

/// (bucket, bytes) lists as the stubs show them; checked by requests_of.
using requests_arg = nb::typed<nb::handle, std::vector<std::pair<int, int>>>;
using unit_requests_arg = nb::typed<nb::handle, std::vector<std::vector<std::pair<int, int>>>>;

void bind_fsdp_step(nb::module_& models_module) {
  models::fsdp_step const d{};
  models_module.def(
      "record_fsdp_step",
      [](lease_trace& t, unit_requests_arg units, str_arg what, requests_arg non_unit, bool train, int_arg micro_batches,
         bool recompute, int_arg prefetch, int_arg grad_depth, int_arg request_multiple) {
        if (!PySequence_Check(units.ptr()) || nb::isinstance<nb::str>(units))
          throw nb::type_error(headroom::detail::concat("units = ", repr_of(units),
                                                        "; expected one list of (bucket, bytes) pairs per unit")
                                   .c_str());
        models::fsdp_requests r;
        std::size_t u = 0;
        for (nb::handle row : units) r.units.push_back(requests_of(row, headroom::detail::concat("units[", u++, "]")));
        r.non_unit = requests_of(non_unit, "non_unit");
        auto const buffer = as_choice(what, "what", {"params", "grads"}) == 0 ? models::fsdp_buffer::params
                                                                               : models::fsdp_buffer::grads;
        models::record_fsdp_step(t, r, buffer,
                                 {.train = train,
                                  .micro_batches = as_size(micro_batches, "micro_batches"),
                                  .recompute = recompute,
                                  .prefetch = as_size(prefetch, "prefetch"),
                                  .grad_depth = as_size(grad_depth, "grad_depth"),
                                  .request_multiple = as_u64(request_multiple, "request_multiple")});
      },
      nb::arg("trace"), nb::arg("units"), nb::arg("what"), nb::kw_only(), nb::arg("non_unit") = nb::tuple(),
      nb::arg("train") = d.train, nb::arg("micro_batches") = d.micro_batches, nb::arg("recompute") = d.recompute,
      nb::arg("prefetch") = d.prefetch, nb::arg("grad_depth") = d.grad_depth,
      nb::arg("request_multiple") = d.request_multiple,
      "Records one modelled Megatron-FSDP step of the 'params' or 'grads' double buffer into `trace` (which "
      "declares the buckets): `units` in forward order, each a list of (bucket, bytes); requests are the bytes "
      "rounded up to request_multiple (1: as given). Bad input is refused before anything is recorded "
      "(pool/fsdp_trace.hpp).");
}

}  // namespace

void bind_pool_lifetimes(nb::module_& sub) {
  nb::list planners;
  for (auto const name : lifetime_planners) planners.append(nb::str(name.data(), name.size()));
  sub.attr("lifetime_planners") = nb::tuple(planners);

  nb::class_<lease_trace>(sub, "LeaseTrace",
                          "A recorded step (or several) of one allocator: declared buckets, then acquire / release "
                          "events and step boundaries; written and read as the versioned text format (docs/pool.md).")
      .def(nb::init<>())
      .def(
          "declare",
          [](lease_trace& t, int_arg bucket, nb::handle unit, int_arg group, nb::handle dtype, int_arg nbytes) {
            t.declare(bucket_of(bucket, unit, group, dtype, nbytes));
          },
          nb::arg("bucket"), nb::kw_only(), nb::arg("unit").none(), nb::arg("group") = 0, nb::arg("dtype"),
          nb::arg("nbytes"),
          "Declares a bucket: its unit (None: outside every unit, never planned), group, dtype name and the bytes "
          "Megatron plans it by.")
      .def(
          "acquire", [](lease_trace& t, int_arg b, int_arg n) { t.acquire(as_u64(b, "bucket"), as_u64(n, "nbytes")); },
          nb::arg("bucket"), nb::arg("nbytes"))
      .def(
          "release", [](lease_trace& t, int_arg b) { t.release(as_u64(b, "bucket")); }, nb::arg("bucket"))
      .def("end_step", &lease_trace::end_step, "A step boundary (nothing may be held).")
      .def("to_text", &lease_trace::to_text)
      .def_static(
          "parse", [](std::string const& text) { return parse_lease_trace(text); }, nb::arg("text"),
          "Reads the text format; errors name the line and the value.")
      .def_prop_ro("steps", &lease_trace::steps)
      .def_prop_ro("events", [](lease_trace const& t) { return t.events().size(); })
      .def_prop_ro("buckets", [](lease_trace const& t) { return t.buckets().size(); })
      .def(nb::self == nb::self)
      .def("__repr__", [](lease_trace const& t) {
        return headroom::detail::concat("LeaseTrace(", t.buckets().size(), " buckets, ", t.events().size(),
                                        " events, ", t.steps(), " steps)");
      });

  nb::class_<lifetime_plan>(sub, "LifetimePlan",
                            "A fixed arena offset per bucket: the best of a lifetime packing and Megatron's MaxPool "
                            "and by_bytes replayed on a lease trace (plan_lifetimes).")
      .def_ro("planner", &lifetime_plan::planner)
      .def_ro("winner", &lifetime_plan::winner)
      .def_ro("alignment", &lifetime_plan::alignment)
      .def_ro("arena_bytes", &lifetime_plan::arena_bytes)
      .def_ro("bound", &lifetime_plan::bound)
      .def_ro("steps", &lifetime_plan::steps)
      .def_prop_ro("offsets",
                   [](lifetime_plan const& p) {
                     nb::dict d;
                     for (auto const& [b, o] : p.offsets) d[nb::int_(b)] = o;
                     return d;
                   })
      .def_prop_ro("bucket_bytes",
                   [](lifetime_plan const& p) {
                     nb::dict d;
                     for (auto const& [b, n] : p.bytes) d[nb::int_(b)] = n;
                     return d;
                   })
      .def_prop_ro("alternatives",
                   [](lifetime_plan const& p) {
                     nb::dict d;
                     for (auto const& [b, alt] : p.alternatives) {
                       nb::list l;
                       for (auto const& [o, n] : alt) l.append(nb::make_tuple(o, n));
                       d[nb::int_(b)] = l;
                     }
                     return d;
                   })
      .def_prop_ro("candidates", &candidates_of)
      .def_prop_ro("infeasible",
                   [](lifetime_plan const& p) {
                     nb::list l;
                     for (auto const& c : p.candidates)
                       if (!c.feasible) l.append(c.name);
                     return l;
                   })
      .def_prop_ro("ratio_to_bound", &lifetime_plan::ratio_to_bound)
      .def_prop_ro("fingerprint", &lifetime_plan::fingerprint)
      .def(nb::self == nb::self)
      .def("__str__", &lifetime_plan::to_string)
      .def("__repr__", [](lifetime_plan const& p) { return "<LifetimePlan " + p.to_string() + ">"; });

  sub.def(
      "plan_lifetimes",
      [](lease_trace const& t, int_arg alignment, std::string const& planner, bool follow_moves) {
        return plan_lifetimes(
            t, {.alignment = as_size(alignment, "alignment"), .planner = planner, .follow_moves = follow_moves});
      },
      nb::arg("trace"), nb::arg("alignment") = default_alignment, nb::arg("planner") = "interval",
      nb::arg("follow_moves") = false,
      "Plans a lease trace: interval = the best candidate; max / by_bytes = that replay alone. "
      "follow_moves: the caller serves a replay's moves (LearningArena does), so interval takes an "
      "infeasible max / by_bytes replay too.");

  nb::class_<learning_arena>(sub, "LearningArena",
                             "Run-time bookkeeping of an arena planned from the first step (docs/pool.md).")
      .def(
          "__init__",
          [](learning_arena* self, std::string const& planner, int_arg alignment, int_arg max_events) {
            new (self) learning_arena(
                {planner, as_size(alignment, "alignment"), as_size(max_events, "max_events")});
          },
          nb::arg("planner") = "interval", nb::kw_only(), nb::arg("alignment") = default_alignment,
          nb::arg("max_events") = learning_arena_options{}.max_events)
      .def(
          "declare",
          [](learning_arena& a, int_arg bucket, nb::handle unit, int_arg group, nb::handle dtype, int_arg nbytes) {
            a.declare(bucket_of(bucket, unit, group, dtype, nbytes));
          },
          nb::arg("bucket"), nb::kw_only(), nb::arg("unit").none(), nb::arg("group") = 0, nb::arg("dtype"),
          nb::arg("nbytes"))
      .def(
          "acquire",
          [](learning_arena& a, int_arg b, int_arg n, bool keep_place) {
            return a.acquire(as_u64(b, "bucket"), as_u64(n, "nbytes"), keep_place);
          },
          nb::arg("bucket"), nb::arg("nbytes"), nb::kw_only(), nb::arg("keep_place") = false,
          "The arena offset to serve the bucket at, or None (serve it from the caching allocator). keep_place: "
          "where the bucket's first lease of the step was (capacity_error when another lease holds it now).")
      .def(
          "can_acquire",
          [](learning_arena const& a, nb::handle buckets, nb::handle releasable) {
            auto const ids = as_size_list(buckets, "buckets");
            auto const free = as_size_list(releasable, "releasable");
            std::vector<std::uint64_t> const b(ids.begin(), ids.end()), r(free.begin(), free.end());
            return a.can_acquire(b, r);
          },
          nb::arg("buckets"), nb::arg("releasable") = nb::tuple(),
          "Whether acquiring each bucket now, in order, finds room in the arena, the leases of releasable "
          "counted as released.")
      .def(
          "release", [](learning_arena& a, int_arg b) { a.release(as_u64(b, "bucket")); }, nb::arg("bucket"))
      .def("end_step", &learning_arena::end_step, "A step boundary; True when arena_bytes changed.")
      .def("replan", &learning_arena::replan, "Plans every distinct step seen again; True when arena_bytes changed.")
      .def_prop_ro("learning", &learning_arena::learning)
      .def_prop_ro("arena_bytes", &learning_arena::arena_bytes)
      .def_prop_ro("plan", [](learning_arena const& a) { return a.plan(); })
      .def_prop_ro("trace", [](learning_arena const& a) { return a.trace(); }, "A copy of the recorded trace.")
      .def("stats", [](learning_arena const& a) { return stats_of(a.stats()); });

  nb::module_ models_module = nb::borrow<nb::module_>(sub.attr("models"));  // bind_pool made it first
  bind_fsdp_step(models_module);
}

}  // namespace headroom::python
