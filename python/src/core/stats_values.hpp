// SPDX-License-Identifier: Apache-2.0
#pragma once
// Python values as statistics, for the stats bindings (bind_stats.cpp, bind_stats_steady_state.cpp).
//
//   classify(v)        what a value is: an exact int64, a bool, a float64, an int past int64, or
//                      not a statistic (str, None, complex, numpy datetime / str, ...); Python
//                      ints and anything with __index__ exact, numpy bool as bool (never 1.0),
//                      numpy floating scalars as float64
//   checked_of(d)      a stats::checked_report from a dict, never raising for a value: a bad one
//                      is the report's fault, which the reductions carry to every rank
//   strict_report_of   a stats::dynamic_report (headroom.stats.Report): ints and floats only,
//                      TypeError / invalid_argument naming the key and the value
// Dicts are read from a snapshot of their items (strong references), so a value whose
// __index__ or __float__ mutates the dict cannot free what is being read; messages are built
// only on the failing path.
#include <nanobind/nanobind.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "convert.hpp"
#include "headroom/stats/checked_report.hpp"
#include "headroom/stats/dynamic_report.hpp"

namespace headroom::python::stats_values {

namespace nb = nanobind;

struct classified {
  enum tag_t { int64, boolean, float64, past_int64, not_a_number } tag = not_a_number;
  std::int64_t i = 0;
  double f = 0;
};

/// repr() cut to `n` characters (a value's repr can be any size).
[[nodiscard]] inline std::string short_repr(nb::handle h, std::size_t n = 64) {
  std::string s = repr_of(h);
  if (s.size() > n) s = s.substr(0, n - 3) + "...";
  return s;
}

[[nodiscard]] inline classified from_index(nb::handle v) {
  nb::object i = nb::steal(PyNumber_Index(v.ptr()));
  if (!i.is_valid()) {
    PyErr_Clear();
    return {};
  }
  int overflow = 0;
  long long const x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0) return {classified::past_int64};
  if (x == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return {};
  }
  return {classified::int64, static_cast<std::int64_t>(x)};
}

/// The numpy dtype kind of a numpy scalar ('b', 'i', 'u', 'f', 'M', ...), or 0.
[[nodiscard]] inline char numpy_kind(nb::handle v) {
  PyObject* const dt = PyObject_GetAttrString(v.ptr(), "dtype");
  if (dt == nullptr) {
    PyErr_Clear();
    return 0;
  }
  nb::object dtype = nb::steal(dt);
  PyObject* const k = PyObject_GetAttrString(dtype.ptr(), "kind");
  if (k == nullptr) {
    PyErr_Clear();
    return 0;
  }
  nb::object kind = nb::steal(k);
  if (!PyUnicode_Check(kind.ptr()) || PyUnicode_GetLength(kind.ptr()) != 1) return 0;
  Py_UCS4 const c = PyUnicode_ReadChar(kind.ptr(), 0);
  return c < 128 ? static_cast<char>(c) : 0;
}

[[nodiscard]] inline classified classify(nb::handle v) {
  PyObject* const p = v.ptr();
  if (PyBool_Check(p)) return {classified::boolean, p == Py_True ? 1 : 0};
  if (PyLong_Check(p)) return from_index(v);
  if (PyFloat_Check(p)) return {classified::float64, 0, PyFloat_AsDouble(p)};
  if (PyUnicode_Check(p) || PyBytes_Check(p) || PyComplex_Check(p) || p == Py_None) return {};
  switch (numpy_kind(v)) {
    case 'b': {
      int const t = PyObject_IsTrue(p);
      if (t < 0) {
        PyErr_Clear();
        return {};
      }
      return {classified::boolean, t};
    }
    case 'i':
    case 'u': return from_index(v);
    case 'f': {
      double const d = PyFloat_AsDouble(p);  // via __float__
      if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return {};
      }
      return {classified::float64, 0, d};
    }
    case 0: break;
    default: return {};  // datetime, timedelta, complex, str, object...
  }
  if (PyIndex_Check(p)) return from_index(v);
  return {};
}

inline constexpr char const* expected_number = "an int, float or bool";

/// A dict's (key, value) pairs with strong references; `what` names the argument in TypeError.
[[nodiscard]] inline std::vector<std::pair<nb::object, nb::object>> items_of(nb::handle h, char const* what) {
  if (!PyDict_Check(h.ptr()))
    throw nb::type_error(
        headroom::detail::concat(what, " = ", short_repr(h), "; expected a headroom.stats.Report or a dict").c_str());
  nb::object items = nb::steal(PyDict_Items(h.ptr()));
  if (!items.is_valid()) throw nb::python_error();
  std::vector<std::pair<nb::object, nb::object>> out;
  Py_ssize_t const n = PyList_Size(items.ptr());
  out.reserve(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* const kv = PyList_GetItem(items.ptr(), i);
    out.emplace_back(nb::borrow(PyTuple_GetItem(kv, 0)), nb::borrow(PyTuple_GetItem(kv, 1)));
  }
  return out;
}

/// A checked report from a dict (its order, or sorted by key when `sorted`): bools kept as
/// bools, anything that is not a statistic recorded as the fault, never raised.
[[nodiscard]] inline stats::checked_report checked_of(nb::handle h, bool sorted, char const* what = "report") {
  auto items = items_of(h, what);
  stats::checked_report r;
  std::vector<std::pair<std::string, nb::object>> named;
  named.reserve(items.size());
  for (auto& [k, v] : items) {
    if (!PyUnicode_Check(k.ptr())) {
      r.reject(short_repr(k, 40), "(key)", "a str key");
      continue;
    }
    Py_ssize_t len = 0;
    char const* s = PyUnicode_AsUTF8AndSize(k.ptr(), &len);
    if (s == nullptr) {
      PyErr_Clear();
      r.reject(short_repr(k, 40), "(key)", "a key encodable as UTF-8");
      continue;
    }
    named.emplace_back(std::string(s, static_cast<std::size_t>(len)), std::move(v));
  }
  if (sorted) std::sort(named.begin(), named.end(), [](auto const& a, auto const& b) { return a.first < b.first; });
  for (auto const& [name, v] : named) {
    auto const c = classify(v);
    switch (c.tag) {
      case classified::int64: r.set(name, c.i); break;
      case classified::boolean: r.set(name, c.i != 0); break;
      case classified::float64: r.set(name, c.f); break;
      case classified::past_int64: r.reject(name, short_repr(v), "an int that fits in int64"); break;
      case classified::not_a_number:
        r.reject(name, short_repr(v) + " (" + nb::type_name(v.type()).c_str() + ")", expected_number);
    }
  }
  return r;
}

/// A Report from a dict: ints (exact int64) and floats only; raises naming the key and value.
[[nodiscard]] inline stats::dynamic_report strict_report_of(nb::handle h, char const* what = "report") {
  if (nb::isinstance<stats::dynamic_report>(h)) return nb::cast<stats::dynamic_report>(h);
  stats::dynamic_report r;
  for (auto& [k, v] : items_of(h, what)) {
    if (!PyUnicode_Check(k.ptr()))
      throw nb::type_error(headroom::detail::concat(what, " key ", short_repr(k), "; expected a str").c_str());
    std::string const name = nb::cast<std::string>(k);
    auto const c = classify(v);
    if (c.tag == classified::int64) r.set(name, c.i);
    else if (c.tag == classified::float64) r.set(name, c.f);
    else if (c.tag == classified::past_int64)
      throw invalid_argument(
          headroom::detail::concat(what, "['", name, "'] = ", short_repr(v), " does not fit in int64"));
    else
      throw nb::type_error(headroom::detail::concat(what, "['", name, "'] = ", short_repr(v), " (",
                                                    nb::type_name(v.type()).c_str(),
                                                    "); expected an int (exact int64) or a float")
                               .c_str());
  }
  return r;
}

}  // namespace headroom::python::stats_values
