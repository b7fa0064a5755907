// SPDX-License-Identifier: Apache-2.0
// headroom::pool from Python: workloads, execution orders, the fixed / max / interval planners,
// plans as data, validation, fingerprints, the model presets and the host unit pool (for
// can_acquire and acquire/release on a plan). python/headroom/pool.py is the Pythonic layer.
#include "headroom/pool.hpp"
#include "headroom/pool/models.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/operators.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"

namespace headroom::python {

namespace {

using namespace headroom::pool;

/// The padding policy chosen at run time from Python: the planners are templates on their
/// padding policy, so one policy that dispatches keeps one instantiation per planner. Each
/// case gives the sizes and description of headroom's own policy of that name.
struct padding_choice {
  enum class kind : std::uint8_t { none, elements, bytes };
  kind k = kind::none;
  std::uint64_t multiple = 1;

  [[nodiscard]] std::uint64_t padded_bytes(bucket const& b) const {
    switch (k) {
      case kind::none: return no_padding{}.padded_bytes(b);
      case kind::elements: return pad_elements{multiple}.padded_bytes(b);
      case kind::bytes: return align_up(b.bytes, multiple);  // align_bytes<multiple>
    }
    return b.bytes;
  }
  [[nodiscard]] std::string describe() const {
    switch (k) {
      case kind::none: return no_padding{}.describe();
      case kind::elements: return pad_elements{multiple}.describe();
      case kind::bytes: return "align bytes to " + std::to_string(multiple);
    }
    return {};
  }
};
static_assert(padding_policy<padding_choice>);

padding_choice padding_of(nb::handle h) {
  if (h.is_none()) return {};
  if (nb::isinstance<padding_choice>(h)) return nb::cast<padding_choice>(h);
  throw nb::type_error(headroom::detail::concat("padding = ", repr_of(h),
                                                "; expected None or a headroom.pool Padding (pad_elements(n), "
                                                "align_bytes(n))")
                           .c_str());
}

std::size_t alignment_of(nb::handle h) {
  std::size_t const a = as_size(h, "alignment");
  expects(is_power_of_two(a), "alignment = ", a, "; expected a power of two");
  return a;
}

std::vector<execution_order> orders_of(nb::handle h) {
  if (nb::isinstance<execution_order>(h)) return {nb::cast<execution_order>(h)};
  std::vector<execution_order> out;
  if (!PySequence_Check(h.ptr()) || nb::isinstance<nb::str>(h))
    throw nb::type_error(
        headroom::detail::concat("orders = ", repr_of(h), "; expected a list of ExecutionOrder").c_str());
  std::size_t i = 0;
  for (nb::handle o : h) {
    if (!nb::isinstance<execution_order>(o))
      throw nb::type_error(headroom::detail::concat("orders[", i, "] = ", repr_of(o),
                                                    "; expected an ExecutionOrder (headroom.pool.order)")
                               .c_str());
    out.push_back(nb::cast<execution_order>(o));
    ++i;
  }
  return out;
}

template <class T>
std::vector<T> list_of(nb::handle h, char const* what, char const* type_name) {
  if (!PySequence_Check(h.ptr()) || nb::isinstance<nb::str>(h))
    throw nb::type_error(headroom::detail::concat(what, " = ", repr_of(h), "; expected a list of ", type_name).c_str());
  std::vector<T> out;
  std::size_t i = 0;
  for (nb::handle item : h) {
    if (!nb::isinstance<T>(item))
      throw nb::type_error(
          headroom::detail::concat(what, "[", i, "] = ", repr_of(item), "; expected a ", type_name).c_str());
    out.push_back(nb::cast<T>(item));
    ++i;
  }
  return out;
}

template <class T>
std::string printed(T const& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

/// A plan of the fixed or max planner, by dtype or by bytes.
plan make_slot_plan(workload const& w, str_arg planner, str_arg category, int_arg buffers, int_arg alignment,
                    nb::typed<nb::handle, padding_choice> padding) {
  std::size_t const which = as_choice(planner, "planner", {fixed::name, max::name});
  std::size_t const by = as_choice(category, "category", {"by_dtype", "by_bytes"});
  plan_options const o{as_size(buffers, "buffers"), alignment_of(alignment)};
  padding_choice const pad = padding_of(padding);
  if (which == 0) return by == 0 ? make_plan<fixed, by_dtype>(w, o, pad) : make_plan<fixed, by_bytes>(w, o, pad);
  return by == 0 ? make_plan<max, by_dtype>(w, o, pad) : make_plan<max, by_bytes>(w, o, pad);
}

std::optional<std::size_t> unit_or_none(std::size_t u) {
  return u == no_unit ? std::nullopt : std::optional<std::size_t>(u);
}

/// One rank's host unit pool on a plan (strict assignment, dynamic non-unit buffers): the arena
/// is real host memory, leases report offsets from its base.
struct host_pool {
  explicit host_pool(plan const& p) : pool(p, host::aligned_resource{}, stream) {}
  host::inline_stream stream;
  host_unit_pool<> pool;
};
using host_lease = host_unit_pool<>::lease;

nb::dict stats_dict(pool_stats const& s) {
  nb::dict d;
  d["slots_total"] = s.slots_total;
  d["slots_in_use"] = s.slots_in_use;
  d["slots_in_use_peak"] = s.slots_in_use_peak;
  d["arena_bytes"] = s.arena_bytes;
  d["persistent_bytes"] = s.persistent_bytes;
  d["bytes_reserved"] = s.bytes_reserved;
  d["fallback_bytes_in_use"] = s.fallback_bytes_in_use;
  d["fallback_bytes_peak"] = s.fallback_bytes_peak;
  d["acquisitions"] = s.acquisitions;
  d["refetches"] = s.refetches;
  d["releases"] = s.releases;
  d["moves"] = s.moves;
  d["cross_stream_waits"] = s.cross_stream_waits;
  d["fallback_allocations"] = s.fallback_allocations;
  d["off_trace_fallbacks"] = s.off_trace_fallbacks;
  d["release_events"] = s.release_events;
  return d;
}

void bind_workloads(nb::module_& sub) {
  nb::class_<bucket>(sub, "Bucket", "One bucket of a unit: dtype, un-padded payload bytes, optional label.")
      .def(
          "__init__",
          [](bucket* self, nb::handle type, int_arg bytes, std::string label) {
            new (self) bucket{as_dtype(type), as_u64(bytes, "bucket bytes"), std::move(label)};
          },
          nb::arg("dtype"), nb::arg("bytes"), nb::arg("label") = "")
      .def_static(
          "of_elements",
          [](nb::handle type, int_arg elements, std::string label) {
            return elements_of(as_dtype(type), as_u64(elements, "bucket elements"), std::move(label));
          },
          nb::arg("dtype"), nb::arg("elements"), nb::arg("label") = "",
          "A bucket of `elements` elements of `dtype` (fp8: one byte each, stored as uint8).")
      .def_prop_ro("dtype", [](bucket const& b) { return std::string(name_of(b.type)); })
      .def_prop_ro("bytes", [](bucket const& b) { return b.bytes; })
      .def_prop_ro("elements", [](bucket const& b) { return b.bytes / size_of(b.type); })
      .def_prop_ro("label", [](bucket const& b) { return b.label; })
      .def(nb::self == nb::self)
      .def("__repr__", [](bucket const& b) {
        return headroom::detail::concat("Bucket(", name_of(b.type), ", bytes=", b.bytes,
                                        b.label.empty() ? "" : ", label='", b.label, b.label.empty() ? "" : "'", ")");
      });

  nb::class_<unit>(sub, "Unit", "One FSDP unit: a name and its buckets in parameter-group order.")
      .def(
          "__init__",
          [](unit* self, std::string name, nb::typed<nb::handle, std::vector<bucket>> buckets) {
            new (self) unit{std::move(name), list_of<bucket>(buckets, "buckets", "Bucket")};
          },
          nb::arg("name"), nb::arg("buckets"))
      .def_prop_ro("name", [](unit const& u) { return u.name; })
      .def_prop_ro("buckets", [](unit const& u) { return u.buckets; })
      .def(nb::self == nb::self)
      .def("__repr__", [](unit const& u) {
        return headroom::detail::concat("Unit('", u.name, "', ", u.buckets.size(), " buckets)");
      });

  nb::class_<workload>(sub, "Workload", "Units in discovery order plus the buckets outside every unit.")
      .def(
          "__init__",
          [](workload* self, std::string name, nb::typed<nb::handle, std::vector<unit>> units,
             nb::typed<nb::handle, std::vector<bucket>> non_unit) {
            new (self) workload{std::move(name), list_of<unit>(units, "units", "Unit"),
                                list_of<bucket>(non_unit, "non_unit", "Bucket")};
          },
          nb::arg("name"), nb::arg("units"), nb::arg("non_unit") = nb::list())
      .def_prop_ro("name", [](workload const& w) { return w.name; })
      .def_prop_ro("units", [](workload const& w) { return w.units; })
      .def_prop_ro("non_unit", [](workload const& w) { return w.non_unit; })
      .def("unit_bytes", &workload::unit_bytes)
      .def("non_unit_bytes", &workload::non_unit_bytes)
      .def(
          "validate", [](workload const& w) { validate(w); },
          "Raises invalid_argument / capacity_error naming the first problem.")
      .def(nb::self == nb::self)
      .def("__repr__", [](workload const& w) {
        return headroom::detail::concat("Workload('", w.name, "', ", w.units.size(), " units, ", w.non_unit.size(),
                                        " non-unit buckets)");
      });
  sub.attr("max_workload_bytes") = max_workload_bytes;
  sub.attr("max_buffers") = max_buffers;
  sub.attr("default_alignment") = default_alignment;

  nb::class_<execution_order>(sub, "ExecutionOrder", "The order an engine acquires the units in.")
      .def(
          "__init__",
          [](execution_order* self, std::string name, int_list_arg units) {
            new (self) execution_order{std::move(name), as_size_list(units, "units")};
          },
          nb::arg("name"), nb::arg("units"))
      .def_prop_ro("name", [](execution_order const& o) { return o.name; })
      .def_prop_ro("units", [](execution_order const& o) { return o.units; })
      .def(nb::self == nb::self)
      .def("__len__", [](execution_order const& o) { return o.units.size(); })
      .def("__repr__", [](execution_order const& o) {
        return headroom::detail::concat("ExecutionOrder('", o.name, "', ", o.units.size(), " entries)");
      });
  sub.def(
      "training_order",
      [](nb::handle w, std::string name) {
        return nb::isinstance<workload>(w) ? training_order(nb::cast<workload const&>(w), std::move(name))
                                           : training_order(as_size(w, "units"), std::move(name));
      },
      nb::arg("workload_or_units"), nb::arg("name") = "train", "u0 .. u(n-1), u(n-1) .. u0");
  sub.def(
      "evaluation_order",
      [](nb::handle w, std::string name) {
        return nb::isinstance<workload>(w) ? evaluation_order(nb::cast<workload const&>(w), std::move(name))
                                           : evaluation_order(as_size(w, "units"), std::move(name));
      },
      nb::arg("workload_or_units"), nb::arg("name") = "eval", "u0 .. u(n-1)");
  sub.def(
      "validate_orders",
      [](int_arg units, nb::typed<nb::handle, std::vector<execution_order>> orders, int_arg resident) {
        auto const o = orders_of(orders);
        validate_orders(as_size(units, "units"), o, as_size(resident, "resident"));
      },
      nb::arg("units"), nb::arg("orders"), nb::arg("resident"));
}

void bind_plans(nb::module_& sub) {
  nb::class_<padding_choice>(sub, "Padding", "The sizes a plan is made for (no_padding, pad_elements, align_bytes).")
      .def_static("none", [] { return padding_choice{}; })
      .def_static(
          "elements",
          [](int_arg multiple) {
            std::uint64_t const m = as_u64(multiple, "pad_elements multiple");
            expects(m > 0, "pad_elements multiple = 0; expected > 0");
            return padding_choice{padding_choice::kind::elements, m};
          },
          nb::arg("multiple"), "Each bucket's element count padded to a multiple (Megatron's _pad).")
      .def_static(
          "bytes",
          [](int_arg alignment) {
            std::uint64_t const a = as_u64(alignment, "align_bytes alignment");
            expects(is_power_of_two(a), "align_bytes alignment = ", a, "; expected a power of two");
            return padding_choice{padding_choice::kind::bytes, a};
          },
          nb::arg("alignment"), "Each bucket rounded up to a multiple of `alignment` bytes.")
      .def("padded_bytes", &padding_choice::padded_bytes, nb::arg("bucket"))
      .def("describe", &padding_choice::describe)
      .def("__repr__", [](padding_choice const& p) { return "Padding('" + p.describe() + "')"; });

  nb::class_<slot_shape>(sub, "SlotShape", "One slot of a buffer group: category, ordinal, bytes, definer.")
      .def_ro("category", &slot_shape::category)
      .def_ro("category_name", &slot_shape::category_name)
      .def_ro("ordinal", &slot_shape::ordinal)
      .def_ro("bytes", &slot_shape::bytes)
      .def_ro("defining_unit", &slot_shape::defining_unit)
      .def_ro("defining_bucket", &slot_shape::defining_bucket)
      .def("__repr__", [](slot_shape const& s) {
        return headroom::detail::concat("SlotShape(", s.category_name, "#", s.ordinal, ", bytes=", s.bytes,
                                        ", defined by unit ", s.defining_unit, " bucket ", s.defining_bucket, ")");
      });
  nb::class_<slot>(sub, "Slot", "One shape in one buffer group, at a fixed arena offset.")
      .def_ro("group", &slot::group)
      .def_ro("shape", &slot::shape)
      .def_ro("offset", &slot::offset)
      .def_ro("bytes", &slot::bytes)
      .def("__repr__", [](slot const& s) {
        return headroom::detail::concat("Slot(group=", s.group, ", shape=", s.shape, ", offset=", s.offset,
                                        ", bytes=", s.bytes, ")");
      });

  nb::class_<plan>(sub, "Plan", "What a pool will allocate: slots, offsets, arena bytes (see docs/pool.md).")
      .def_ro("workload_name", &plan::workload_name)
      .def_ro("planner", &plan::planner)
      .def_ro("category_policy", &plan::category_policy)
      .def_ro("padding", &plan::padding)
      .def_ro("buffers", &plan::buffers)
      .def_ro("alignment", &plan::alignment)
      .def_ro("resident", &plan::resident)
      .def_ro("arena_bytes", &plan::arena_bytes)
      .def_prop_ro("orders", [](plan const& p) { return p.orders; })
      .def_prop_ro("representative_unit", [](plan const& p) { return unit_or_none(p.representative_unit); })
      .def_prop_ro("shapes", [](plan const& p) { return p.shapes; })
      .def_prop_ro("slots", [](plan const& p) { return p.slots; })
      .def_prop_ro("unit_names", [](plan const& p) { return p.unit_names; })
      .def_prop_ro("pooled",
                   [](plan const& p) {
                     std::vector<bool> out;
                     for (char c : p.pooled) out.push_back(c != 0);
                     return out;
                   })
      .def_prop_ro("bucket_bytes", [](plan const& p) { return p.bucket_bytes; })
      .def_prop_ro("bucket_shape",
                   [](plan const& p) {
                     std::vector<std::vector<std::optional<std::uint32_t>>> out;
                     for (auto const& u : p.bucket_shape) {
                       auto& row = out.emplace_back();
                       for (auto s : u) row.push_back(s == no_shape ? std::nullopt : std::optional<std::uint32_t>(s));
                     }
                     return out;
                   })
      .def_prop_ro("non_unit_bytes", [](plan const& p) { return p.non_unit_bytes; })
      .def("unit_count", &plan::unit_count)
      .def("pooled_units", &plan::pooled_units)
      .def("unpooled_unit_bytes", &plan::unpooled_unit_bytes)
      .def("non_unit_total_bytes", &plan::non_unit_total_bytes)
      .def("fallback_bytes", &plan::fallback_bytes)
      .def("group_bytes", &plan::group_bytes)
      .def(
          "candidate_slots",
          [](plan const& p, int_arg u, int_arg b) {
            return p.candidate_slots(as_size(u, "unit"), as_size(b, "bucket"));
          },
          nb::arg("unit"), nb::arg("bucket"), "Slot indices bucket `b` of unit `u` may take (one per group).")
      .def(
          "bucket_offsets",
          [](plan const& p, int_arg u, int_arg b) {
            std::vector<std::uint64_t> out;
            for (auto s : p.candidate_slots(as_size(u, "unit"), as_size(b, "bucket"))) out.push_back(p.slots[s].offset);
            return out;
          },
          nb::arg("unit"), nb::arg("bucket"),
          "Arena offsets of those slots (one per group; one for interval plans; empty: not pooled).")
      .def("chosen_class", &plan::chosen_class)
      .def("describe_units", &plan::describe_units)
      .def("to_string", &plan::to_string)
      .def("__str__", &plan::to_string)
      .def("__repr__",
           [](plan const& p) {
             return headroom::detail::concat("Plan('", p.workload_name, "', planner=", p.planner,
                                             ", category=", p.category_policy, ", buffers=", p.buffers,
                                             ", arena_bytes=", p.arena_bytes, ", slots=", p.slots.size(), ")");
           })
      .def_prop_ro(
          "fingerprint", [](plan const& p) { return fingerprint(p); },
          "FNV-1a 64 of every field: equal plans, equal fingerprints (pool/fingerprint.hpp).")
      .def(nb::self == nb::self);

  sub.def("make_plan", &make_slot_plan, nb::arg("workload"), nb::arg("planner"), nb::arg("category") = "by_dtype",
          nb::arg("buffers") = 2, nb::arg("alignment") = default_alignment, nb::arg("padding") = nb::none(),
          "Megatron-FSDP's fixed / max planner with N buffers.");
  sub.def(
      "make_interval_plan",
      [](workload const& w, nb::typed<nb::handle, std::vector<execution_order>> orders, int_arg resident,
         int_arg alignment, nb::typed<nb::handle, padding_choice> padding) {
        auto const o = orders_of(orders);
        return make_interval_plan(w, std::span<execution_order const>(o),
                                  interval_options{as_size(resident, "resident"), alignment_of(alignment)},
                                  padding_of(padding));
      },
      nb::arg("workload"), nb::arg("orders"), nb::arg("resident") = 2, nb::arg("alignment") = default_alignment,
      nb::arg("padding") = nb::none(), "One byte range per unit; units resident together never overlap.");
  sub.def(
      "lower_bound",
      [](workload const& w, nb::typed<nb::handle, std::vector<execution_order>> orders, int_arg resident,
         int_arg alignment, nb::typed<nb::handle, padding_choice> padding) {
        auto const o = orders_of(orders);
        return lower_bound(w, std::span<execution_order const>(o), as_size(resident, "resident"),
                           alignment_of(alignment), padding_of(padding));
      },
      nb::arg("workload"), nb::arg("orders"), nb::arg("resident") = 2, nb::arg("alignment") = default_alignment,
      nb::arg("padding") = nb::none(), "No fixed-address plan of these orders fits in fewer bytes.");

  nb::class_<residency_conflict>(sub, "ResidencyConflict", "Where an order breaks a plan.")
      .def_ro("position", &residency_conflict::position)
      .def_ro("first_unit", &residency_conflict::first_unit)
      .def_ro("second_unit", &residency_conflict::second_unit)
      .def_ro("message", &residency_conflict::message)
      .def("__repr__", [](residency_conflict const& c) { return "ResidencyConflict('" + c.message + "')"; });
  sub.def(
      "find_conflict",
      [](plan const& p, execution_order const& o, int_arg resident) {
        return find_conflict(p, o, as_size(resident, "resident"));
      },
      nb::arg("plan"), nb::arg("order"), nb::arg("resident") = 0,
      "The first conflict of `order` with the plan, or None (resident 0: the plan's own N).");
  sub.def(
      "validate_plan",
      [](plan const& p, execution_order const& o, int_arg resident) { validate(p, o, as_size(resident, "resident")); },
      nb::arg("plan"), nb::arg("order"), nb::arg("resident") = 0, "Raises logic_error when `order` breaks the plan.");
  sub.def("units_sharing_bytes", &units_sharing_bytes, nb::arg("plan"));
  sub.def(
      "fingerprint", [](plan const& p) { return fingerprint(p); }, nb::arg("plan"));
}

void bind_unit_pool(nb::module_& sub) {
  nb::class_<host_lease>(sub, "Lease", "A unit's (or non-unit bucket's) buffers while held.")
      .def_prop_ro("valid", &host_lease::valid)
      .def_prop_ro("kind", [](host_lease const& l) { return l.kind() == target_kind::unit ? "unit" : "non_unit"; })
      .def_prop_ro("index", &host_lease::index)
      .def("__len__", &host_lease::size)
      .def(
          "slot", [](host_lease const& l, int_arg b) { return unit_or_none(l.slot(as_size(b, "bucket"))); },
          nb::arg("bucket"), "Slot index of bucket `b`, or None for a fallback buffer.")
      .def(
          "nbytes", [](host_lease const& l, int_arg b) { return l.bytes(as_size(b, "bucket")).size(); },
          nb::arg("bucket"));
  nb::class_<host_pool>(sub, "HostUnitPool",
                        "The unit pool on host memory (strict assignment, dynamic non-unit buffers): acquire, "
                        "release and can_acquire on a plan without a GPU.")
      .def(nb::init<plan const&>(), nb::arg("plan"))
      .def_prop_ro("plan", [](host_pool const& h) { return h.pool.get_plan(); })
      .def_prop_ro("stats", [](host_pool const& h) { return stats_dict(h.pool.stats()); })
      .def("stats_text", [](host_pool const& h) { return printed(h.pool.stats()); })
      .def(
          "acquire", [](host_pool& h, int_arg u) { return h.pool.acquire(as_size(u, "unit"), h.stream); },
          nb::arg("unit"), nb::keep_alive<0, 1>())
      .def(
          "acquire_non_unit",
          [](host_pool& h, int_arg b) { return h.pool.acquire_non_unit(as_size(b, "non-unit bucket"), h.stream); },
          nb::arg("bucket"), nb::keep_alive<0, 1>())
      .def(
          "release", [](host_pool& h, host_lease& l) { h.pool.release(l, h.stream); }, nb::arg("lease"))
      .def(
          "offset",
          [](host_pool const& h, host_lease const& l, int_arg b) -> std::optional<std::uint64_t> {
            std::size_t const bucket = as_size(b, "bucket");
            if (l.slot(bucket) == std::numeric_limits<std::size_t>::max()) return std::nullopt;
            // A lease of another pool points into that pool's arena: refused, not a meaningless offset.
            auto const at = reinterpret_cast<std::uintptr_t>(l.bytes(bucket).data());
            auto const base = reinterpret_cast<std::uintptr_t>(h.pool.arena());
            expects(at >= base && at - base < h.pool.get_plan().arena_bytes, "HostUnitPool.offset: the lease of ",
                    l.kind() == target_kind::unit ? "unit " : "non-unit bucket ", l.index(),
                    " is not this pool's (its buffer is outside this arena); expected a lease from this pool");
            return static_cast<std::uint64_t>(at - base);
          },
          nb::arg("lease"), nb::arg("bucket"), "Arena offset of bucket `b` of a lease (None: outside the arena).")
      .def(
          "can_acquire",
          [](host_pool const& h, int_list_arg units, int_list_arg releasable) {
            auto const u = as_size_list(units, "units");
            auto const r = as_size_list(releasable, "releasable");
            return h.pool.can_acquire(u, r);
          },
          nb::arg("units"), nb::arg("releasable") = nb::tuple(),
          "Would acquiring every unit of `units` succeed now, if `releasable` were released first?")
      .def(
          "holders", [](host_pool const& h, int_arg u) { return h.pool.holders(as_size(u, "unit")); }, nb::arg("unit"));
}

void bind_models(nb::module_& sub) {
  nb::module_ m = sub.def_submodule("models", "Workloads of real hybrid models, as Megatron-FSDP buckets them.");
  m.def("names", [] {
    std::vector<std::string> out;
    for (auto const& c : models::model_table()) out.push_back(c.name);
    return out;
  });
  auto cases = [](std::vector<models::reference_case> const& v) {
    std::vector<std::pair<std::string, std::size_t>> out;
    for (auto const& c : v) out.emplace_back(c.config.name, c.expert_parallel);
    return out;
  };
  m.def(
      "reference_cases", [cases] { return cases(models::reference_cases()); },
      "(model, expert_parallel) of the reference table, in order.");
  m.def(
      "all_cases", [cases] { return cases(models::all_cases()); },
      "reference_cases() and the other hybrid families (EP 8 for their experts).");
  m.def(
      "parameter_count", [](std::string const& name) { return models::parameter_count(models::model(name)); },
      nb::arg("model"));
  m.def(
      "pattern", [](std::string const& name) { return models::model(name).pattern; }, nb::arg("model"));
  m.def(
      "make_workload",
      [](std::string const& name, int_arg expert_parallel, bool fp8_params, bool first_last_layers_bf16,
         nb::handle grad_dtype, int_arg non_unit_bucket_elements) {
        models::build_options o;
        o.expert_parallel = as_size(expert_parallel, "expert_parallel");
        o.fp8_params = fp8_params;
        o.first_last_layers_bf16 = first_last_layers_bf16;
        if (!grad_dtype.is_none()) o.grad_dtype = as_dtype(grad_dtype, "grad_dtype");
        o.non_unit_bucket_elements = as_u64(non_unit_bucket_elements, "non_unit_bucket_elements");
        return models::make_workload(models::model(name), o);
      },
      nb::arg("model"), nb::arg("expert_parallel") = 1, nb::arg("fp8_params") = false,
      nb::arg("first_last_layers_bf16") = true, nb::arg("grad_dtype") = nb::none(),
      nb::arg("non_unit_bucket_elements") = 40'000'000, "One rank's FSDP workload of a model preset.");
}

}  // namespace

void bind_pool(nb::module_& m) {
  nb::module_ sub = m.def_submodule("pool", "headroom::pool");
  // The planners of make_plan and make_interval_plan (lifetime_planners: plan_lifetimes').
  sub.attr("planners") = nb::make_tuple(fixed::name, max::name, interval::name);
  bind_workloads(sub);
  bind_plans(sub);
  bind_unit_pool(sub);
  bind_models(sub);
  bind_pool_lifetimes(sub);
}

}  // namespace headroom::python
