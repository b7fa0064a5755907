// SPDX-License-Identifier: Apache-2.0
// headroom::stats from Python: reports (name -> exact int64 or float64, PyTorch's key names),
// checked reports (bad values carried to every rank, bools kept), the reduce plan, the wire
// words of the max and gather reductions (what the torch adapters all_reduce / all_gather over
// torch.distributed), the steady state (bind_stats_steady_state.cpp), peaks per phase, and the
// reductions of reports given every rank's values. python/headroom/stats.py is the Pythonic layer.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "headroom/stats/checked_report.hpp"
#include "headroom/stats/detail/wire.hpp"
#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/keys.hpp"
#include "headroom/stats/phases.hpp"
#include "headroom/stats/plan.hpp"
#include "headroom/stats/table.hpp"
#include "stats_values.hpp"

namespace headroom::python {

void bind_stats_steady_state(nb::module_& sub);  // bind_stats_steady_state.cpp

namespace {

using namespace headroom::stats;

nb::object to_python(stats::value const& v) {
  if (v.index() == 0) return nb::int_(std::get<0>(v));
  return nb::float_(std::get<1>(v));
}

using stats_values::checked_of;
using stats_values::strict_report_of;

reduce_plan plan_of(nb::handle h, std::size_t size) {
  if (h.is_none()) return reduce_plan(size);
  if (nb::isinstance<reduce_plan>(h)) return nb::cast<reduce_plan>(h);
  return reduce_plan(as_size(h, "plan capacity"));
}

bool nan_propagates(nb::handle h) { return as_choice(h, "nan", {"propagate", "ignore"}) == 0; }

/// A copy of a 1-d int64 array's words: the array may be a temporary (a __dlpack__ export)
/// that is gone once the cast returns, so nothing keeps a pointer into it.
std::vector<std::int64_t> words_of(nb::handle h, std::size_t expected, char const* what) {
  using words_in = nb::ndarray<std::int64_t const, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  words_in a;
  if (!nb::try_cast(h, a, false))
    throw nb::type_error(headroom::detail::concat(what, " = ", stats_values::short_repr(h),
                                                  "; expected a 1-d contiguous int64 numpy array (CPU)")
                             .c_str());
  expects(a.shape(0) == expected, what, " has ", a.shape(0), " words; expected ", expected,
          " (the reduce plan's size on every rank)");
  return {a.data(), a.data() + a.shape(0)};
}

/// Calls fn with the report `h` stands for: a Report as it is, a CheckedReport, or a dict as a
/// CheckedReport in its order (bools kept as bools, bad values carried as the fault).
template <class Fn>
decltype(auto) with_report(nb::handle h, Fn&& fn) {
  if (nb::isinstance<dynamic_report>(h)) return fn(nb::cast<dynamic_report const&>(h));
  if (nb::isinstance<checked_report>(h)) return fn(nb::cast<checked_report const&>(h));
  checked_report const r = checked_of(h, false);
  return fn(r);
}

template <class Report>
std::vector<std::string> names_of() {
  return {Report::names.begin(), Report::names.end()};
}

std::string_view kind_name(checked_report const& r, std::size_t i) {
  if (r.is_bool(i)) return "bool";
  return kind_of(r.report()[i].value) == value_kind::int64 ? "int" : "float";
}

constexpr char const* max_name = "stats::reducer::max";
constexpr char const* gather_name = "stats::reducer::gather";

}  // namespace

void bind_stats(nb::module_& m) {
  nb::module_ sub = m.def_submodule("stats", "headroom::stats");

  nb::module_ keys = sub.def_submodule("keys", "Key names (torch.cuda.memory_stats() names where they mean the same)");
  keys.attr("allocated_bytes_current") = std::string(keys::allocated_bytes_current);
  keys.attr("allocated_bytes_peak") = std::string(keys::allocated_bytes_peak);
  keys.attr("allocated_bytes_allocated") = std::string(keys::allocated_bytes_allocated);
  keys.attr("allocated_bytes_freed") = std::string(keys::allocated_bytes_freed);
  keys.attr("reserved_bytes_current") = std::string(keys::reserved_bytes_current);
  keys.attr("reserved_bytes_peak") = std::string(keys::reserved_bytes_peak);
  keys.attr("allocation_current") = std::string(keys::allocation_current);
  keys.attr("allocation_peak") = std::string(keys::allocation_peak);
  keys.attr("allocation_allocated") = std::string(keys::allocation_allocated);
  keys.attr("allocation_freed") = std::string(keys::allocation_freed);
  keys.attr("num_alloc_retries") = std::string(keys::num_alloc_retries);
  keys.attr("num_ooms") = std::string(keys::num_ooms);
  keys.attr("device_free_bytes") = std::string(keys::device_free_bytes);
  keys.attr("device_total_bytes") = std::string(keys::device_total_bytes);
  keys.attr("device_used_bytes") = std::string(keys::device_used_bytes);
  sub.def("memory_report_keys", &names_of<memory_report>,
          "The keys of stats::memory_report (what training dashboards log), in order.");
  sub.def("allocator_report_keys", &names_of<allocator_report>,
          "The keys of stats::allocator_report (what a statistics_resource reports), in order.");
  sub.def(
      "memory_report_schema_hash", [] { return memory_report::schema_hash(); },
      "schema_hash() of stats::memory_report: a Report with its keys (all int64) has the same.");

  nb::class_<dynamic_report>(sub, "Report", "name -> exact int64 or float64, in insertion order.")
      .def(
          "__init__", [](dynamic_report* self, nb::handle values) { new (self) dynamic_report(strict_report_of(values)); },
          nb::arg("values") = nb::dict())
      .def("__len__", &dynamic_report::size)
      .def("__contains__", [](dynamic_report const& r, std::string const& k) { return r.contains(k); })
      .def("__getitem__", [](dynamic_report const& r, std::string const& k) { return to_python(r.at(k)); })
      .def("keys",
           [](dynamic_report const& r) {
             std::vector<std::string> out;
             for (auto const e : r) out.emplace_back(e.name);
             return out;
           })
      .def("as_dict",
           [](dynamic_report const& r) {
             nb::dict d;
             for (auto const e : r) d[nb::str(e.name.data(), e.name.size())] = to_python(e.value);
             return d;
           })
      .def("kinds",
           [](dynamic_report const& r) {
             std::vector<std::string> out;
             for (auto const e : r) out.emplace_back(name_of(kind_of(e.value)));
             return out;
           })
      .def_prop_ro("schema_hash", &dynamic_report::schema_hash)
      .def("prefixed", &dynamic_report::prefixed, nb::arg("prefix"))
      .def(
          "__eq__",
          [](dynamic_report const& a, nb::handle b) {
            return nb::isinstance<dynamic_report>(b) && a == nb::cast<dynamic_report const&>(b);
          },
          nb::arg("other").none())
      .def("__str__",
           [](dynamic_report const& r) {
             std::ostringstream os;
             os << r;
             return os.str();
           })
      .def("__repr__", [](dynamic_report const& r) {
        std::ostringstream os;
        os << "Report(" << r << ")";
        return os.str();
      });

  nb::class_<reduce_plan>(sub, "ReducePlan", "The wire layout of one reduction: the same on every rank.")
      .def(
          "__init__",
          [](reduce_plan* self, int_arg capacity) { new (self) reduce_plan(as_size(capacity, "capacity")); },
          nb::arg("capacity"))
      .def_prop_ro("capacity", &reduce_plan::capacity)
      .def("max_words", &reduce_plan::max_words)
      .def("gather_words_per_rank", &reduce_plan::gather_words_per_rank)
      .def(
          "gather_words", [](reduce_plan const& p, int_arg r) { return p.gather_words(as_int(r, "ranks")); },
          nb::arg("ranks"))
      .def("__eq__",
           [](reduce_plan const& a, nb::handle b) {
             return nb::isinstance<reduce_plan>(b) && a == nb::cast<reduce_plan const&>(b);
           })
      .def("__str__", [](reduce_plan const& p) {
        std::ostringstream os;
        os << p;
        return os.str();
      });

  nb::class_<stat_summary>(sub, "StatSummary", "One key of a gather: every rank's value, max, min, mean.")
      .def_ro("name", &stat_summary::name)
      .def_prop_ro("kind", [](stat_summary const& s) { return std::string(name_of(s.kind)); })
      .def_prop_ro("per_rank",
                   [](stat_summary const& s) {
                     nb::list out;
                     for (auto const& v : s.per_rank) out.append(to_python(v));
                     return out;
                   })
      .def_prop_ro("max", [](stat_summary const& s) { return to_python(s.max); })
      .def_prop_ro("min", [](stat_summary const& s) { return to_python(s.min); })
      .def_ro("mean", &stat_summary::mean)
      .def_ro("argmax", &stat_summary::argmax)
      .def_ro("argmin", &stat_summary::argmin);
  nb::class_<rank_table>(sub, "RankTable", "The result of gather: per key, every rank's value and a summary.")
      .def_prop_ro("ranks", &rank_table::ranks)
      .def_prop_ro("rows", [](rank_table const& t) { return t.rows(); })
      .def("__len__", &rank_table::size)
      .def("__getitem__", [](rank_table const& t, std::string const& k) { return t.at(k); })
      .def("maxima", &rank_table::maxima, "The per-key maxima as a Report.")
      .def("__str__", [](rank_table const& t) {
        std::ostringstream os;
        os << t;
        return os.str();
      });

  nb::class_<checked_report>(sub, "CheckedReport",
                             "A report from values nobody checked yet: a bad value is kept as the report's fault "
                             "(never raised), which the reductions carry to every rank; bools stay bools.")
      .def(
          "__init__",
          [](checked_report* self, nb::handle values, bool sort) { new (self) checked_report(checked_of(values, sort)); },
          nb::arg("values"), nb::arg("sort") = false,
          "From a dict, in its order or sorted by key (what every rank lays out the same way).")
      .def("__len__", &checked_report::size)
      .def_prop_ro("fault",
                   [](checked_report const& r) -> std::optional<std::string> {
                     if (!r.fault()) return std::nullopt;
                     return r.fault()->sentence();
                   },
                   "None, or the first bad value: \"key 'k' = v; expected ...\"")
      .def_prop_ro("report", &checked_report::report, "The accepted values as a Report (bools as 0 / 1).")
      .def("keys",
           [](checked_report const& r) {
             std::vector<std::string> out;
             for (auto const e : r.report()) out.emplace_back(e.name);
             return out;
           })
      .def(
          "kinds",
          [](checked_report const& r) {
            std::vector<std::string> out;
            for (std::size_t i = 0; i < r.size(); ++i) out.emplace_back(kind_name(r, i));
            return out;
          },
          "'int', 'bool' or 'float' per key.")
      .def_prop_ro("schema_hash", &checked_report::schema_hash)
      .def(
          "typed",
          [](checked_report const& r, dynamic_report const& result) {
            expects(result.size() == r.size(), "CheckedReport.typed: a result of ", result.size(), " keys for ",
                    r.size(), " keys");
            nb::dict d;
            for (std::size_t i = 0; i < r.size(); ++i) {
              auto const e = result[i];
              nb::str const k(e.name.data(), e.name.size());
              if (r.is_bool(i) && e.value.index() == 0) d[k] = nb::bool_(std::get<0>(e.value) != 0);
              else d[k] = to_python(e.value);
            }
            return d;
          },
          nb::arg("result"), "A reduction's result as a dict, with this report's bool keys as bools.");

  // ---- the wire: what the adapters send through torch.distributed ---------------------------
  // `report` is a Report, a CheckedReport or a dict (read as a CheckedReport). `rank` travels
  // with a fault so every rank can name it.
  sub.def(
      "pack_max",
      [](nb::handle report, nb::handle plan, int_arg writer, str_arg nan, int_arg rank) {
        return with_report(report, [&](auto const& r) {
          reduce_plan const p = plan_of(plan, r.size());
          std::vector<std::int64_t> words(p.max_words());
          stats::detail::pack_max(r, as_int(writer, "writer"), nan_propagates(nan), std::span<std::int64_t>(words),
                                  as_int(rank, "rank"));
          return to_numpy(std::move(words));
        });
      },
      nb::arg("report"), nb::arg("plan") = nb::none(), nb::arg("writer") = -1, nb::arg("nan") = "propagate",
      nb::arg("rank") = 0, "The int64 words this rank all_reduces with MAX (plan.max_words() of them).");
  sub.def(
      "unpack_max",
      [](nb::handle report, nb::handle reduced, nb::handle plan, int_arg rank, int_arg size) -> nb::object {
        return with_report(report, [&](auto const& r) -> nb::object {
          reduce_plan const p = plan_of(plan, r.size());
          auto const words = words_of(reduced, p.max_words(), "reduced words");
          int const me = as_int(rank, "rank");
          std::span<std::int64_t const> const view(words);
          int const writer =
              stats::detail::check_max_header(r, view, p.capacity(), me, as_int(size, "size"), max_name);
          if (writer != -1 && writer != me) return nb::none();
          return nb::cast(dynamic_report(stats::detail::unpack_max(r, view)));
        });
      },
      nb::arg("report"), nb::arg("reduced"), nb::arg("plan") = nb::none(), nb::arg("rank") = 0, nb::arg("size") = 1,
      "The reduced Report from the all_reduce(MAX) result (None on ranks other than the writer). Raises, on every "
      "rank: invalid_argument naming the rank, key and value when a rank's report held a bad value, "
      "collective_mismatch when the ranks' reports differ or the words are not a reduction of this report.");
  sub.def(
      "pack_gather",
      [](nb::handle report, nb::handle plan, int_arg writer, int_arg rank) {
        return with_report(report, [&](auto const& r) {
          reduce_plan const p = plan_of(plan, r.size());
          std::vector<std::int64_t> words(p.gather_words_per_rank());
          stats::detail::pack_gather(r, as_int(writer, "writer"), std::span<std::int64_t>(words), as_int(rank, "rank"));
          return to_numpy(std::move(words));
        });
      },
      nb::arg("report"), nb::arg("plan") = nb::none(), nb::arg("writer") = -1, nb::arg("rank") = 0,
      "The int64 words this rank all_gathers (plan.gather_words_per_rank() of them).");
  sub.def(
      "unpack_gather",
      [](nb::handle report, nb::handle gathered, nb::handle plan, int_arg rank, int_arg size,
         str_arg nan) -> nb::object {
        return with_report(report, [&](auto const& r) -> nb::object {
          reduce_plan const p = plan_of(plan, r.size());
          int const n = as_int(size, "size");
          int const me = as_int(rank, "rank");
          stats::detail::check_rank(me, n, gather_name);
          auto const words = words_of(gathered, p.gather_words(n), "gathered words");
          std::span<std::int64_t const> const view(words);
          int const writer =
              stats::detail::check_gather_headers(r, view, p.gather_words_per_rank(), p.capacity(), me, n, gather_name);
          if (writer != -1 && writer != me) return nb::none();
          return nb::cast(stats::detail::unpack_gather(r, view, p.gather_words_per_rank(), n, nan_propagates(nan)));
        });
      },
      nb::arg("report"), nb::arg("gathered"), nb::arg("plan") = nb::none(), nb::arg("rank") = 0, nb::arg("size") = 1,
      nb::arg("nan") = "propagate", "The RankTable from the all_gather result (rank-major words).");

  bind_stats_steady_state(sub);

  // ---- peaks per phase -------------------------------------------------------------------------
  nb::class_<phase_peaks>(sub, "PhasePeaks",
                          "Peaks per phase of a step: open(phase) at its start (after resetting the peak counters), "
                          "close(report) at its end records the report's '.peak' keys as '<phase>/<key>'; a phase "
                          "run several times keeps its highest peak. Phases do not nest.")
      .def(nb::init<>())
      .def("open", [](phase_peaks& p, std::string const& phase) { p.open(phase); }, nb::arg("phase"))
      .def(
          "close", [](phase_peaks& p, nb::handle report) { p.close(strict_report_of(report)); }, nb::arg("report"),
          "Closes the open phase, recording the '.peak' keys of `report` (a dict of ints / floats, or a Report).")
      .def(
          "record",
          [](phase_peaks& p, std::string const& phase, nb::handle report) { p.record(phase, strict_report_of(report)); },
          nb::arg("phase"), nb::arg("report"))
      .def_prop_ro("open_phase", [](phase_peaks const& p) { return std::string(p.open_phase()); })
      .def("report", &phase_peaks::report, "Every recorded phase's peaks, '<phase>/<key>', in the order first recorded.")
      .def("clear", &phase_peaks::clear);

  // ---- reductions of reports given every rank's values ---------------------------------------
  sub.def(
      "max_of",
      [](nb::handle reports, str_arg nan) {
        std::vector<dynamic_report> rs;
        for (nb::handle h : reports) rs.push_back(strict_report_of(h, "reports[i]"));
        expects(!rs.empty(), "stats::max_of: no reports; expected one per rank");
        std::size_t capacity = 0;
        for (auto const& r : rs) capacity = std::max(capacity, r.size());
        reduce_plan const p(capacity);
        bool const prop = nan_propagates(nan);
        // What all_reduce(MAX) computes over every rank's words.
        std::vector<std::int64_t> reduced(p.max_words()), words(p.max_words());
        for (std::size_t q = 0; q < rs.size(); ++q) {
          stats::detail::pack_max(rs[q], -1, prop, std::span<std::int64_t>(words));
          for (std::size_t i = 0; i < words.size(); ++i)
            reduced[i] = q == 0 ? words[i] : std::max(reduced[i], words[i]);
        }
        std::span<std::int64_t const> const out(reduced);
        (void)stats::detail::check_max_header(rs[0], out, p.capacity(), 0, static_cast<int>(rs.size()), max_name);
        return stats::detail::unpack_max(rs[0], out);
      },
      nb::arg("reports"), nb::arg("nan") = "propagate",
      "Every key's exact max over the given per-rank reports (the max reduction's result).");
  sub.def(
      "gather_of",
      [](nb::handle reports, str_arg nan) {
        std::vector<dynamic_report> rs;
        for (nb::handle h : reports) rs.push_back(strict_report_of(h, "reports[i]"));
        expects(!rs.empty(), "stats::gather_of: no reports; expected one per rank");
        std::size_t capacity = 0;
        for (auto const& r : rs) capacity = std::max(capacity, r.size());
        reduce_plan const p(capacity);
        int const n = static_cast<int>(rs.size());
        std::size_t const per = p.gather_words_per_rank();
        std::vector<std::int64_t> all(p.gather_words(n));  // what all_gather computes
        for (std::size_t q = 0; q < rs.size(); ++q)
          stats::detail::pack_gather(rs[q], -1, std::span<std::int64_t>(all).subspan(q * per, per));
        std::span<std::int64_t const> const view(all);
        (void)stats::detail::check_gather_headers(rs[0], view, per, p.capacity(), 0, n, gather_name);
        return stats::detail::unpack_gather(rs[0], view, per, n, nan_propagates(nan));
      },
      nb::arg("reports"), nb::arg("nan") = "propagate",
      "Every rank's values and per-key max / min / mean / argmax over the given per-rank reports.");
}

}  // namespace headroom::python
