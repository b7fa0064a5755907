// SPDX-License-Identifier: Apache-2.0
#pragma once
// Python values to C++ arguments, checked: every binding takes sizes, indices and enums through
// these, so a bad value from Python gets a headroom error (or TypeError) that names it instead
// of nanobind's generic "incompatible function arguments".
//
//   std::uint64_t n = as_u64(obj, "bucket bytes");       // TypeError / invalid_argument
//   dtype t = as_dtype(obj);                              // "bf16", numpy.dtype, torch.bfloat16
//   auto k = as_enum(obj, "planner", {"fixed", "max"});   // index of the name
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/core/dtype.hpp"
#include "headroom/core/error.hpp"

namespace headroom::python {

namespace nb = nanobind;

/// Arguments taken as any Python object and checked by the functions below (so that a bad value
/// gets a message naming it), typed for the stubs as what they accept.
using int_arg = nb::typed<nb::handle, int>;
using str_arg = nb::typed<nb::handle, std::string>;
using int_list_arg = nb::typed<nb::handle, std::vector<std::int64_t>>;

/// Longest repr() a message embeds; longer ones are cut with "..." (a 2^24-element list's repr
/// is 149 MiB).
inline constexpr std::size_t max_repr_chars = 200;
/// Containers longer than this are named by type and length, without calling repr() at all.
inline constexpr Py_ssize_t max_repr_items = 64;

/// repr() of a Python value, for messages: at most max_repr_chars characters, and only
/// "<list of 16777216 items>" for a long container.
[[nodiscard]] inline std::string repr_of(nb::handle h) {
  nb::object keep = nb::borrow(h);  // repr() may run Python code that drops the caller's reference
  if (!PyUnicode_Check(h.ptr()) && !PyBytes_Check(h.ptr()) && (PySequence_Check(h.ptr()) || PyDict_Check(h.ptr()))) {
    Py_ssize_t const n = PyObject_Length(h.ptr());
    if (n < 0) PyErr_Clear();
    if (n > max_repr_items)
      return headroom::detail::concat("<", nb::type_name(h.type()).c_str(), " of ", n, " items>");
  }
  PyObject* r = PyObject_Repr(h.ptr());
  if (r == nullptr) {
    PyErr_Clear();
    return "<unprintable>";
  }
  nb::str s = nb::steal<nb::str>(r);
  Py_ssize_t size = 0;
  char const* utf8 = PyUnicode_AsUTF8AndSize(s.ptr(), &size);
  if (utf8 == nullptr) {
    PyErr_Clear();
    return "<unprintable>";
  }
  std::string out(utf8, static_cast<std::size_t>(size));
  if (out.size() > max_repr_chars) {
    std::size_t cut = max_repr_chars;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 characters
    out.resize(cut);
    out += "...";
  }
  return out;
}

/// The UTF-8 text of a str; TypeError naming `what` for anything else, invalid_argument for a
/// str that has no UTF-8 form (lone surrogates).
[[nodiscard]] inline std::string as_utf8(nb::handle h, std::string_view what) {
  if (!PyUnicode_Check(h.ptr()))
    throw nb::type_error(headroom::detail::concat(what, " = ", repr_of(h), " (", nb::type_name(h.type()).c_str(),
                                                  "); expected a str")
                             .c_str());
  Py_ssize_t size = 0;
  char const* utf8 = PyUnicode_AsUTF8AndSize(h.ptr(), &size);
  if (utf8 == nullptr) {
    PyErr_Clear();
    throw invalid_argument(headroom::detail::concat(what, " = ", repr_of(h), " is not valid UTF-8 text"));
  }
  return {utf8, static_cast<std::size_t>(size)};
}

/// A Python int (or anything with __index__, e.g. numpy integers) as a long long; bools (numpy's
/// too) and floats are refused with TypeError naming `what`. The messages are built only on
/// failure: this runs once per converted value.
[[nodiscard]] inline long long as_index(nb::handle h, std::string_view what) {
  nb::object keep = nb::borrow(h);  // __index__ may drop the caller's last reference to h
  if (PyLong_CheckExact(h.ptr())) {
    int overflow = 0;
    long long const v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow == 0) return v;
  }
  if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr()))  // numpy.bool has no __index__: refused too
    throw nb::type_error(headroom::detail::concat(what, " = ", repr_of(h), " (", nb::type_name(h.type()).c_str(),
                                                  "); expected an integer")
                             .c_str());
  nb::object i = nb::steal(PyNumber_Index(h.ptr()));
  if (!i.is_valid()) throw nb::python_error();
  int overflow = 0;
  long long const v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    throw invalid_argument(
        headroom::detail::concat(what, " = ", repr_of(h), " does not fit in a signed 64-bit integer"));
  }
  return v;
}

/// A non-negative integer below 2^63 (every size and index headroom takes from Python).
[[nodiscard]] inline std::uint64_t as_u64(nb::handle h, std::string_view what) {
  long long const v = as_index(h, what);
  expects(v >= 0, what, " = ", v, "; expected a non-negative integer");
  return static_cast<std::uint64_t>(v);
}
[[nodiscard]] inline std::size_t as_size(nb::handle h, std::string_view what) {
  return static_cast<std::size_t>(as_u64(h, what));
}
/// Any int64 (stats values may be negative).
[[nodiscard]] inline std::int64_t as_i64(nb::handle h, std::string_view what) {
  return static_cast<std::int64_t>(as_index(h, what));
}

/// A sequence (list, tuple, numpy array...) of non-negative integers.
[[nodiscard]] inline std::vector<std::size_t> as_size_list(nb::handle h, std::string_view what) {
  if (PyUnicode_Check(h.ptr()) || PyBytes_Check(h.ptr()) || !PySequence_Check(h.ptr()))
    throw nb::type_error(
        headroom::detail::concat(what, " = ", repr_of(h), "; expected a sequence of integers").c_str());
  std::vector<std::size_t> out;
  std::size_t i = 0;
  for (nb::handle item : h) {
    out.push_back(as_size(item, headroom::detail::concat(what, "[", i, "]")));
    ++i;
  }
  return out;
}

/// One of `names`, case-sensitive; returns its position. invalid_argument lists the choices.
[[nodiscard]] inline std::size_t as_choice(nb::handle h, std::string_view what,
                                           std::initializer_list<std::string_view> names) {
  std::string known;
  if (nb::isinstance<nb::str>(h)) {
    std::string const s = as_utf8(h, what);
    std::size_t i = 0;
    for (auto n : names) {
      if (n == s) return i;
      ++i;
    }
  }
  for (auto n : names) known += (known.empty() ? "'" : ", '") + std::string(n) + "'";
  if (!nb::isinstance<nb::str>(h))
    throw nb::type_error(headroom::detail::concat(what, " = ", repr_of(h), "; expected one of ", known).c_str());
  throw invalid_argument(headroom::detail::concat(what, " = ", repr_of(h), "; expected one of ", known));
}

/// An element type: headroom's names ("bfloat16", "uint8"), short ones ("bf16", "fp16", "f32",
/// "u8", "fp8": stored as uint8 as Megatron does), or anything whose str() is such a name
/// (numpy.dtype("float32"), torch.bfloat16: "torch." is dropped; torch.float8_* are uint8), so no
/// torch import is needed.
[[nodiscard]] inline dtype as_dtype(nb::handle h, std::string_view what = "dtype") {
  std::string name;
  if (nb::isinstance<nb::str>(h)) {
    name = as_utf8(h, what);
  } else {
    name = as_utf8(nb::str(h), what);
    if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
  }
  struct alias {
    std::string_view name;
    dtype type;
  };
  static constexpr alias aliases[] = {
      {"u8", dtype::u8},     {"fp8", dtype::u8},   {"float8", dtype::u8}, {"i8", dtype::i8},      {"i32", dtype::i32},
      {"int", dtype::i64},   {"u32", dtype::u32},  {"i64", dtype::i64},   {"u64", dtype::u64},    {"f16", dtype::f16},
      {"fp16", dtype::f16},  {"half", dtype::f16}, {"bf16", dtype::bf16}, {"f32", dtype::f32},    {"fp32", dtype::f32},
      {"float", dtype::f32}, {"f64", dtype::f64},  {"fp64", dtype::f64},  {"double", dtype::f64},
  };
  for (auto t : {dtype::u8, dtype::i8, dtype::i32, dtype::u32, dtype::i64, dtype::u64, dtype::f16, dtype::bf16,
                 dtype::f32, dtype::f64})
    if (name_of(t) == name) return t;
  for (auto const& a : aliases)
    if (a.name == name) return a.type;
  if (name.rfind("float8_", 0) == 0) return dtype::u8;  // torch.float8_e4m3fn, ...: fp8 is stored as bytes
  std::string known;
  for (auto t : {dtype::u8, dtype::i8, dtype::i32, dtype::u32, dtype::i64, dtype::u64, dtype::f16, dtype::bf16,
                 dtype::f32, dtype::f64})
    known += (known.empty() ? "" : ", ") + std::string(name_of(t));
  throw invalid_argument(headroom::detail::concat(what, " = ", repr_of(h), "; expected one of ", known,
                                                  " (or bf16, fp16, fp32, fp8, u8, ...)"));
}

/// An int that C++ takes as `int` (CP sizes and ranks).
[[nodiscard]] inline int as_int(nb::handle h, std::string_view what) {
  long long const v = as_index(h, what);
  expects(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(), what, " = ", v,
          " does not fit in a 32-bit int");
  return static_cast<int>(v);
}

using int64_array = nb::ndarray<nb::numpy, std::int64_t, nb::ndim<1>>;
using int64_matrix = nb::ndarray<nb::numpy, std::int64_t, nb::ndim<2>>;

/// A numpy int64 array that owns `v` (no copy).
[[nodiscard]] inline int64_array to_numpy(std::vector<std::int64_t>&& v) {
  auto* owner = new std::vector<std::int64_t>(std::move(v));
  nb::capsule free(owner, [](void* p) noexcept { delete static_cast<std::vector<std::int64_t>*>(p); });
  return int64_array(owner->data(), {owner->size()}, free);
}
[[nodiscard]] inline int64_array to_numpy(std::span<std::int64_t const> v) {
  return to_numpy(std::vector<std::int64_t>(v.begin(), v.end()));
}

/// A 1-d array of integers: numpy / DLPack int32 or int64 arrays are read directly (CPU,
/// contiguous), any other sequence element by element; values wider than int64 are refused.
[[nodiscard]] inline std::vector<std::int64_t> as_i64_vector(nb::handle h, std::string_view what) {
  using i64 = nb::ndarray<std::int64_t const, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  using i32 = nb::ndarray<std::int32_t const, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  if (i64 a; nb::try_cast(h, a, false)) return {a.data(), a.data() + a.shape(0)};
  if (i32 a; nb::try_cast(h, a, false)) return {a.data(), a.data() + a.shape(0)};
  if (nb::hasattr(h, "ndim")) {
    long long const ndim = as_index(h.attr("ndim"), headroom::detail::concat(what, ".ndim"));
    if (ndim != 1)
      throw invalid_argument(
          headroom::detail::concat(what, " has ", ndim, " dimensions; expected a 1-d array of integers"));
  }
  if (PyUnicode_Check(h.ptr()) || PyBytes_Check(h.ptr()) || !PySequence_Check(h.ptr()))
    throw nb::type_error(
        headroom::detail::concat(what, " = ", repr_of(h), "; expected a 1-d sequence of integers").c_str());
  std::vector<std::int64_t> out;
  std::size_t i = 0;
  for (nb::handle item : h) {
    out.push_back(as_i64(item, headroom::detail::concat(what, "[", i, "]")));
    ++i;
  }
  return out;
}

}  // namespace headroom::python
