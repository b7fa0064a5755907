// headroom::stats from Python: reports (name -> exact int64 or float64, PyTorch's key names),
// the reduce plan, the wire words of the max and gather reductions (what the torch adapters
// all_reduce / all_gather over torch.distributed), and the reductions of reports given every
// rank's values. python/headroom/stats.py is the Pythonic layer.
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
#include "headroom/stats/detail/wire.hpp"
#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/keys.hpp"
#include "headroom/stats/plan.hpp"
#include "headroom/stats/table.hpp"

namespace headroom::python {

namespace {

using namespace headroom::stats;

nb::object to_python(stats::value const& v) {
  if (v.index() == 0) return nb::int_(std::get<0>(v));
  return nb::float_(std::get<1>(v));
}

/// A report from a dict (insertion order is the report's order) or a Report. Python ints must
/// fit int64 and floats become doubles; anything else is refused naming the key.
dynamic_report report_of(nb::handle h, char const* what = "report") {
  if (nb::isinstance<dynamic_report>(h)) return nb::cast<dynamic_report>(h);
  if (!nb::isinstance<nb::dict>(h))
    throw nb::type_error(
        headroom::detail::concat(what, " = ", repr_of(h), "; expected a headroom.stats.Report or a dict").c_str());
  dynamic_report r;
  for (auto [k, v] : nb::cast<nb::dict>(h)) {
    if (!nb::isinstance<nb::str>(k))
      throw nb::type_error(headroom::detail::concat(what, " key ", repr_of(k), "; expected a str").c_str());
    std::string const name = nb::cast<std::string>(k);
    if (PyFloat_Check(v.ptr()))
      r.set(name, PyFloat_AsDouble(v.ptr()));
    else if (!PyBool_Check(v.ptr()) && PyIndex_Check(v.ptr()))
      r.set(name, static_cast<std::int64_t>(as_i64(v, headroom::detail::concat(what, "['", name, "']"))));
    else if (nb::hasattr(v, "dtype") && nb::hasattr(v, "item") && !PyBool_Check(v.ptr()))
      r.set(name, nb::cast<double>(v.attr("item")()));  // numpy floating scalars
    else
      throw nb::type_error(
          headroom::detail::concat(what, "['", name, "'] = ", repr_of(v), "; expected an int (exact int64) or a float")
              .c_str());
  }
  return r;
}

reduce_plan plan_of(nb::handle h, dynamic_report const& r) {
  if (h.is_none()) return reduce_plan(r.size());
  if (nb::isinstance<reduce_plan>(h)) return nb::cast<reduce_plan>(h);
  return reduce_plan(as_size(h, "plan capacity"));
}

bool nan_propagates(nb::handle h) { return as_choice(h, "nan", {"propagate", "ignore"}) == 0; }

using words_in = nb::ndarray<std::int64_t const, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::span<std::int64_t const> words_of(nb::handle h, std::size_t expected, char const* what) {
  words_in a;
  if (!nb::try_cast(h, a, false))
    throw nb::type_error(
        headroom::detail::concat(what, " = ", repr_of(h), "; expected a 1-d contiguous int64 numpy array (CPU)")
            .c_str());
  expects(a.shape(0) == expected, what, " has ", a.shape(0), " words; expected ", expected,
          " (the reduce plan's size on every rank)");
  return {a.data(), a.shape(0)};
}

template <class Report>
std::vector<std::string> names_of() {
  return {Report::names.begin(), Report::names.end()};
}

using words_out = nb::ndarray<std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

/// The steady-state layout of a dict: per value in the dict's order, its exact Python type
/// ('i' int, 'b' bool, 'f' float) and its slot on the wire (0-based after the header).
struct dict_layout {
  nb::tuple keys;
  std::string_view kinds;
  std::span<std::int64_t const> slots;
};

dict_layout layout_of(nb::handle keys, nb::handle kinds, nb::handle slots) {
  if (!PyTuple_CheckExact(keys.ptr())) throw nb::type_error("keys: expected a tuple of str");
  if (!PyBytes_CheckExact(kinds.ptr())) throw nb::type_error("kinds: expected bytes (b'i', b'b' or b'f' per key)");
  std::size_t const n = static_cast<std::size_t>(PyTuple_Size(keys.ptr()));
  std::string_view const k(PyBytes_AsString(kinds.ptr()), static_cast<std::size_t>(PyBytes_Size(kinds.ptr())));
  words_in sa;
  if (!nb::try_cast(slots, sa, false)) throw nb::type_error("slots: expected a 1-d contiguous int64 numpy array (CPU)");
  expects(sa.shape(0) == n, "slots has ", sa.shape(0), " entries; expected one per key (", n, ")");
  std::span<std::int64_t const> const s(sa.data(), sa.shape(0));
  expects(k.size() == n, "kinds has ", k.size(), " entries; expected one per key (", n, ")");
  for (std::size_t i = 0; i < n; ++i) {
    expects(k[i] == 'i' || k[i] == 'b' || k[i] == 'f', "kinds[", i, "] = '", k[i], "'; expected 'i', 'b' or 'f'");
    expects(s[i] >= 0, "slots[", i, "] = ", s[i], "; expected >= 0");
  }
  return {nb::borrow<nb::tuple>(keys), k, s};
}

/// Writes the values of `d` into words[base + slot] when d has exactly `keys`, in that order,
/// with values of exactly the types in `kinds`, every int within int64: ints and bools as
/// int64, floats as max's order keys (`encode`, NaN propagating) or their bits. Returns false
/// (words partly written) on any difference: the caller takes the general path.
bool pack_dict(nb::handle d, dict_layout const& l, std::span<std::int64_t> words, std::size_t base, bool encode) {
  if (!PyDict_CheckExact(d.ptr())) return false;
  std::size_t const n = l.kinds.size();
  if (static_cast<std::size_t>(PyDict_Size(d.ptr())) != n) return false;
  Py_ssize_t pos = 0;
  PyObject *key = nullptr, *value = nullptr;
  std::size_t i = 0;
  while (PyDict_Next(d.ptr(), &pos, &key, &value)) {
    if (i >= n) return false;
    PyObject* const want = PyTuple_GetItem(l.keys.ptr(), static_cast<Py_ssize_t>(i));
    if (key != want) {
      if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(want)) return false;
      int const eq = PyUnicode_Compare(key, want);
      if (eq == -1 && PyErr_Occurred()) throw nb::python_error();
      if (eq != 0) return false;
    }
    std::size_t const at = base + static_cast<std::size_t>(l.slots[i]);
    if (at >= words.size()) return false;
    switch (l.kinds[i]) {
      case 'i': {
        if (!PyLong_CheckExact(value)) return false;
        int overflow = 0;
        long long const v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow != 0) return false;
        if (v == -1 && PyErr_Occurred()) throw nb::python_error();
        words[at] = static_cast<std::int64_t>(v);
        break;
      }
      case 'b':
        if (!PyBool_Check(value)) return false;
        words[at] = value == Py_True ? 1 : 0;
        break;
      default: {
        if (!PyFloat_CheckExact(value)) return false;
        double const v = PyFloat_AsDouble(value);
        words[at] = encode ? stats::detail::encode(v, reduce_op::max, true) : std::bit_cast<std::int64_t>(v);
      }
    }
    ++i;
  }
  return i == n;
}

/// The dict {keys[i]: value of words[base + slots[i]]} typed by kinds (max's order keys decoded
/// when `encoded`, else bits), or None when words do not start with `header`.
nb::object unpack_dict(std::span<std::int64_t const> words, std::span<std::int64_t const> header,
                       dict_layout const& l, std::size_t base, bool encoded) {
  if (words.size() < header.size() || !std::equal(header.begin(), header.end(), words.begin())) return nb::none();
  std::size_t const n = l.kinds.size();
  nb::dict out;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t const at = base + static_cast<std::size_t>(l.slots[i]);
    expects(at < words.size(), "slots[", i, "] = ", l.slots[i], " is past the ", words.size(), " words");
    std::int64_t const w = words[at];
    nb::object v;
    switch (l.kinds[i]) {
      case 'i': v = nb::steal(PyLong_FromLongLong(w)); break;
      case 'b': v = nb::borrow(w != 0 ? Py_True : Py_False); break;
      default: v = nb::steal(PyFloat_FromDouble(encoded ? stats::detail::decode_double(w, reduce_op::max)
                                                       : std::bit_cast<double>(w)));
    }
    if (!v.is_valid()) throw nb::python_error();
    if (PyDict_SetItem(out.ptr(), PyTuple_GetItem(l.keys.ptr(), static_cast<Py_ssize_t>(i)), v.ptr()) != 0)
      throw nb::python_error();
  }
  return out;
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
          "__init__", [](dynamic_report* self, nb::handle values) { new (self) dynamic_report(report_of(values)); },
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
      .def("__eq__",
           [](dynamic_report const& a, nb::handle b) {
             return nb::isinstance<dynamic_report>(b) && a == nb::cast<dynamic_report const&>(b);
           })
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

  // ---- the wire: what the adapters send through torch.distributed ---------------------------
  sub.def(
      "pack_max",
      [](nb::handle report, nb::handle plan, int_arg writer, str_arg nan) {
        dynamic_report const r = report_of(report);
        reduce_plan const p = plan_of(plan, r);
        std::vector<std::int64_t> words(p.max_words());
        stats::detail::pack_max(r, as_int(writer, "writer"), nan_propagates(nan), std::span<std::int64_t>(words));
        return to_numpy(std::move(words));
      },
      nb::arg("report"), nb::arg("plan") = nb::none(), nb::arg("writer") = -1, nb::arg("nan") = "propagate",
      "The int64 words this rank all_reduces with MAX (plan.max_words() of them).");
  sub.def(
      "unpack_max",
      [](nb::handle report, nb::handle reduced, nb::handle plan, int_arg rank, int_arg size) -> nb::object {
        dynamic_report const r = report_of(report);
        reduce_plan const p = plan_of(plan, r);
        auto const words = words_of(reduced, p.max_words(), "reduced words");
        int const me = as_int(rank, "rank");
        int const writer = stats::detail::check_max_header(r, words, p.capacity(), me, as_int(size, "size"), max_name);
        if (writer != -1 && writer != me) return nb::none();
        return nb::cast(stats::detail::unpack_max(r, words));
      },
      nb::arg("report"), nb::arg("reduced"), nb::arg("plan") = nb::none(), nb::arg("rank") = 0, nb::arg("size") = 1,
      "The reduced Report from the all_reduce(MAX) result (None on ranks other than the writer). Raises "
      "collective_mismatch when the ranks' reports differ, on every rank.");
  sub.def(
      "pack_gather",
      [](nb::handle report, nb::handle plan, int_arg writer) {
        dynamic_report const r = report_of(report);
        reduce_plan const p = plan_of(plan, r);
        std::vector<std::int64_t> words(p.gather_words_per_rank());
        stats::detail::pack_gather(r, as_int(writer, "writer"), std::span<std::int64_t>(words));
        return to_numpy(std::move(words));
      },
      nb::arg("report"), nb::arg("plan") = nb::none(), nb::arg("writer") = -1,
      "The int64 words this rank all_gathers (plan.gather_words_per_rank() of them).");
  sub.def(
      "unpack_gather",
      [](nb::handle report, nb::handle gathered, nb::handle plan, int_arg rank, int_arg size,
         str_arg nan) -> nb::object {
        dynamic_report const r = report_of(report);
        reduce_plan const p = plan_of(plan, r);
        int const n = as_int(size, "size");
        auto const words = words_of(gathered, p.gather_words(n), "gathered words");
        int const me = as_int(rank, "rank");
        int const writer =
            stats::detail::check_gather_headers(r, words, p.gather_words_per_rank(), p.capacity(), me, n, gather_name);
        if (writer != -1 && writer != me) return nb::none();
        return nb::cast(stats::detail::unpack_gather(r, words, p.gather_words_per_rank(), n, nan_propagates(nan)));
      },
      nb::arg("report"), nb::arg("gathered"), nb::arg("plan") = nb::none(), nb::arg("rank") = 0, nb::arg("size") = 1,
      nb::arg("nan") = "propagate", "The RankTable from the all_gather result (rank-major words).");

  // ---- the steady state: a dict's values straight to / from the wire -------------------------
  sub.def(
      "pack_dict_values",
      [](nb::handle values, nb::handle keys, nb::handle kinds, nb::handle slots, nb::handle words, int_arg base,
         bool encode) {
        auto const l = layout_of(keys, kinds, slots);
        words_out w;
        if (!nb::try_cast(words, w, false))
          throw nb::type_error("words: expected a writable 1-d contiguous int64 numpy array (CPU)");
        return pack_dict(values, l, std::span<std::int64_t>(w.data(), w.shape(0)), as_size(base, "base"), encode);
      },
      nb::arg("values"), nb::arg("keys"), nb::arg("kinds"), nb::arg("slots"), nb::arg("words"), nb::arg("base"),
      nb::arg("encode"),
      "Writes dict `values` into words[base + slots[i]] (ints and bools as int64; floats as the max reduction's "
      "order keys when `encode`, else their bits) when it has exactly `keys` in that order, with values of exactly "
      "the types in `kinds` (b'i' int, b'b' bool, b'f' float per key) and every int within int64; False (words "
      "partly written) otherwise. pack_max / pack_gather write the same words for the report whose keys are "
      "sorted into those slots.");
  sub.def(
      "unpack_dict_values",
      [](nb::handle words, nb::handle header, nb::handle keys, nb::handle kinds, nb::handle slots, int_arg base,
         bool encoded) {
        auto const l = layout_of(keys, kinds, slots);
        words_in w, h;
        if (!nb::try_cast(words, w, false) || !nb::try_cast(header, h, false))
          throw nb::type_error("words, header: expected 1-d contiguous int64 numpy arrays (CPU)");
        return unpack_dict(std::span<std::int64_t const>(w.data(), w.shape(0)),
                           std::span<std::int64_t const>(h.data(), h.shape(0)), l, as_size(base, "base"), encoded);
      },
      nb::arg("words"), nb::arg("header"), nb::arg("keys"), nb::arg("kinds"), nb::arg("slots"), nb::arg("base"),
      nb::arg("encoded"),
      "{keys[i]: the value in words[base + slots[i]]} typed by `kinds` (order keys decoded when `encoded`), or None "
      "when `words` do not start with `header` (then unpack_max / unpack_gather name the mismatch).");

  // ---- reductions of reports given every rank's values ---------------------------------------
  sub.def(
      "max_of",
      [](nb::handle reports, str_arg nan) {
        std::vector<dynamic_report> rs;
        for (nb::handle h : reports) rs.push_back(report_of(h, "reports[i]"));
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
        for (nb::handle h : reports) rs.push_back(report_of(h, "reports[i]"));
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
