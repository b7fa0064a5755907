// SPDX-License-Identifier: Apache-2.0
// headroom.stats.SteadyState: one dict shape's place on the reducers' wire, so that a training
// loop that logs the same keys every step packs its dict straight into the words (one C++ pass,
// no report built from the key strings, no sorting) and reads the result back the same way.
// The layout (header, fault block, slots, order keys) is the C++ reducer's own: the state is
// built by packing the sorted checked report with stats::detail, and only its value slots are
// written per step, so Python holds no bit layout.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "convert.hpp"
#include "headroom/stats/detail/wire.hpp"
#include "headroom/stats/plan.hpp"
#include "stats_values.hpp"

namespace headroom::python {

namespace {

using namespace headroom::stats;

class steady_state {
 public:
  /// The state of `values` (a dict of exactly int, bool and float values, str keys), or null
  /// when it has another value type or a bad value (the general path handles those).
  static std::unique_ptr<steady_state> of(nb::handle values, reduce_plan const& plan, int rank, int size) {
    if (!PyDict_CheckExact(values.ptr())) return nullptr;
    auto items = stats_values::items_of(values, "values");
    std::string kinds;
    for (auto const& [k, v] : items) {
      if (!PyUnicode_CheckExact(k.ptr())) return nullptr;
      if (PyBool_Check(v.ptr())) kinds += 'b';
      else if (PyLong_CheckExact(v.ptr())) kinds += 'i';
      else if (PyFloat_CheckExact(v.ptr())) kinds += 'f';
      else return nullptr;
    }
    checked_report const sorted = stats_values::checked_of(values, true);
    if (!sorted.valid() || sorted.size() > plan.capacity() || sorted.size() != items.size()) return nullptr;
    stats::detail::check_rank(rank, size, "stats.SteadyState");
    auto s = std::unique_ptr<steady_state>(new steady_state());
    s->plan_ = plan;
    s->size_ = size;
    s->kinds_ = std::move(kinds);
    std::map<std::string_view, std::size_t> slot_of;
    for (std::size_t i = 0; i < sorted.size(); ++i) slot_of.emplace(sorted.report()[i].name, i);
    nb::list keys;
    for (auto const& [k, v] : items) {
      keys.append(k);
      s->slots_.push_back(slot_of.at(nb::cast<std::string_view>(k)));
    }
    s->keys_ = nb::tuple(keys);
    s->max_words_.resize(plan.max_words());
    stats::detail::pack_max(sorted, -1, true, std::span<std::int64_t>(s->max_words_), rank);
    s->gather_words_.resize(plan.gather_words_per_rank());
    stats::detail::pack_gather(sorted, -1, std::span<std::int64_t>(s->gather_words_), rank);
    return s;
  }

  /// max's words for `values`, or None unless it has this state's keys, order and value types.
  nb::object pack_max(nb::handle values) const { return pack(values, max_words_, reduce_plan::max_header_words, true); }
  nb::object pack_gather(nb::handle values) const {
    return pack(values, gather_words_, reduce_plan::gather_header_words, false);
  }

  /// The typed result in the caller's order, or None when the reduced header is not this
  /// state's (a rank's keys, types or validity differ: the general path names it).
  nb::object unpack_max(nb::handle reduced) const {
    auto const w = words(reduced);
    std::size_t const h = reduce_plan::max_header_words;
    if (w.size() != max_words_.size() || !std::equal(w.begin(), w.begin() + h, max_words_.begin())) return nb::none();
    nb::dict out;
    for (std::size_t i = 0; i < slots_.size(); ++i)
      set(out, i, typed(kinds_[i], w[h + slots_[i]], true));
    return out;
  }

  /// Per key in the caller's order: (every rank's value, rank of the max, rank of the min) from
  /// gather's rank-major words; None when a rank's header is not this state's.
  nb::object unpack_gather(nb::handle gathered) const {
    auto const w = words(gathered);
    std::size_t const per = gather_words_.size(), h = reduce_plan::gather_header_words;
    if (w.size() != per * static_cast<std::size_t>(size_)) return nb::none();
    for (int q = 0; q < size_; ++q)
      if (!std::equal(gather_words_.begin(), gather_words_.begin() + h, w.begin() + static_cast<std::ptrdiff_t>(q * per)))
        return nb::none();
    nb::list out;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      nb::list values;
      int hi = 0, lo = 0;
      std::int64_t best_hi = 0, best_lo = 0;
      for (int q = 0; q < size_; ++q) {
        std::int64_t const raw = w[static_cast<std::size_t>(q) * per + h + slots_[i]];
        values.append(typed(kinds_[i], raw, false));
        value const v = kinds_[i] == 'f' ? value(std::in_place_index<1>, std::bit_cast<double>(raw))
                                         : value(std::in_place_index<0>, raw);
        std::int64_t const kmax = stats::detail::encode_value(v, reduce_op::max, true);
        std::int64_t const kmin = stats::detail::encode_value(v, reduce_op::min, true);
        if (q == 0 || kmax > best_hi) best_hi = kmax, hi = q;  // ties: the lowest rank, as the C++ gather
        if (q == 0 || kmin > best_lo) best_lo = kmin, lo = q;
      }
      out.append(nb::make_tuple(nb::tuple(values), hi, lo));
    }
    return out;
  }

  [[nodiscard]] nb::tuple keys() const { return keys_; }

 private:
  steady_state() = default;

  static std::vector<std::int64_t> words(nb::handle h) {
    using in = nb::ndarray<std::int64_t const, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
    in a;
    if (!nb::try_cast(h, a, false))
      throw nb::type_error("words: expected a 1-d contiguous int64 numpy array (CPU)");
    return {a.data(), a.data() + a.shape(0)};  // a copy: the array may be a temporary export
  }

  static nb::object typed(char kind, std::int64_t w, bool encoded) {
    switch (kind) {
      case 'i': return nb::steal(PyLong_FromLongLong(w));
      case 'b': return nb::borrow(w != 0 ? Py_True : Py_False);
      default: return nb::steal(PyFloat_FromDouble(encoded ? stats::detail::decode_double(w, reduce_op::max) : std::bit_cast<double>(w)));
    }
  }

  void set(nb::dict& out, std::size_t i, nb::object v) const {
    if (!v.is_valid()) throw nb::python_error();
    if (PyDict_SetItem(out.ptr(), PyTuple_GetItem(keys_.ptr(), static_cast<Py_ssize_t>(i)), v.ptr()) != 0)
      throw nb::python_error();
  }

  nb::object pack(nb::handle values, std::vector<std::int64_t> const& tmpl, std::size_t base, bool encode) const {
    if (!PyDict_CheckExact(values.ptr())) return nb::none();
    std::size_t const n = kinds_.size();
    if (static_cast<std::size_t>(PyDict_Size(values.ptr())) != n) return nb::none();
    std::vector<std::int64_t> out(tmpl);
    Py_ssize_t pos = 0;
    PyObject *key = nullptr, *value = nullptr;
    std::size_t i = 0;
    // Borrowed references are safe here: nothing below runs Python code (exact str compare,
    // exact int / float reads).
    while (PyDict_Next(values.ptr(), &pos, &key, &value)) {
      if (i >= n) return nb::none();
      PyObject* const want = PyTuple_GetItem(keys_.ptr(), static_cast<Py_ssize_t>(i));
      if (key != want) {
        if (!PyUnicode_CheckExact(key)) return nb::none();
        int const eq = PyUnicode_Compare(key, want);
        if (eq == -1 && PyErr_Occurred()) throw nb::python_error();
        if (eq != 0) return nb::none();
      }
      std::int64_t& w = out[base + slots_[i]];
      switch (kinds_[i]) {
        case 'i': {
          if (!PyLong_CheckExact(value)) return nb::none();
          int overflow = 0;
          long long const v = PyLong_AsLongLongAndOverflow(value, &overflow);
          if (overflow != 0) return nb::none();
          w = static_cast<std::int64_t>(v);
          break;
        }
        case 'b':
          if (!PyBool_Check(value)) return nb::none();
          w = value == Py_True ? 1 : 0;
          break;
        default: {
          if (!PyFloat_CheckExact(value)) return nb::none();
          double const v = PyFloat_AsDouble(value);
          w = encode ? stats::detail::encode(v, reduce_op::max, true) : std::bit_cast<std::int64_t>(v);
        }
      }
      ++i;
    }
    if (i != n) return nb::none();
    return nb::cast(to_numpy(std::move(out)));
  }

  reduce_plan plan_{0};
  int size_ = 1;
  nb::tuple keys_;
  std::string kinds_;
  std::vector<std::size_t> slots_;
  std::vector<std::int64_t> max_words_, gather_words_;
};

}  // namespace

void bind_stats_steady_state(nb::module_& sub) {
  nb::class_<steady_state>(sub, "SteadyState",
                           "One dict shape's place on the reducers' wire: keys in the caller's order and each value's "
                           "exact type (int, bool, float), for one plan, rank and group size.")
      .def_static(
          "of",
          [](nb::handle values, reduce_plan const& plan, int_arg rank, int_arg size) -> nb::object {
            auto s = steady_state::of(values, plan, as_int(rank, "rank"), as_int(size, "size"));
            if (!s) return nb::none();
            return nb::cast(s.release(), nb::rv_policy::take_ownership);
          },
          nb::arg("values"), nb::arg("plan"), nb::arg("rank"), nb::arg("size"),
          "The steady state of dict `values` (str keys; int, bool and float values, ints within int64), or None.")
      .def_prop_ro("keys", &steady_state::keys)
      .def("pack_max", &steady_state::pack_max, nb::arg("values"),
           "The max reduction's words for `values`, or None unless it has this state's keys, order and types.")
      .def("pack_gather", &steady_state::pack_gather, nb::arg("values"),
           "The gather's words for `values`, or None unless it has this state's keys, order and types.")
      .def("unpack_max", &steady_state::unpack_max, nb::arg("reduced"),
           "The typed result dict in the caller's order, or None when the reduced header is not this state's.")
      .def("unpack_gather", &steady_state::unpack_gather, nb::arg("gathered"),
           "Per key: (every rank's value, rank of the max, rank of the min), ties to the lowest rank; None when a "
           "rank's header is not this state's.");
}

}  // namespace headroom::python
