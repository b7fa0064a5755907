// SPDX-License-Identifier: Apache-2.0
// headroom::cp from Python: padding, partitions in both layouts, and the index plans (which
// global rows a rank holds, where raw rows and next-token labels land) as numpy int64 arrays
// that torch.index_select / numpy.take can use. python/headroom/cp.py is the Pythonic layer.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "bindings.hpp"
#include "common/cp_partition.hpp"
#include "convert.hpp"
#include "headroom/cp/gather.hpp"  // detail::batch_fingerprint, what the host gather agrees on
#include "headroom/cp/layout.hpp"
#include "headroom/cp/ops.hpp"
#include "headroom/cp/padding.hpp"
#include "headroom/cp/partition.hpp"

namespace headroom::python {

namespace {

std::string layout_of(nb::handle h) { return as_utf8(h, "layout"); }

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  return v;
}

/// Next-token labels and loss mask of this rank (cp::shifted_label_split) for 1-d raw ids.
std::pair<int64_array, int64_array> shifted_labels(cp::padding const& pd, any_partition const& ap,
                                                   std::vector<std::int64_t> const& raw_ids,
                                                   std::vector<std::int64_t> const& raw_mask, std::int64_t pad_value) {
  return ap.visit([&](auto const& p) {
    std::vector<std::int64_t> labels(static_cast<std::size_t>(p.local_rows()));
    std::vector<std::int64_t> mask(static_cast<std::size_t>(p.local_rows()));
    cp::shifted_label_split(
        pd, p, cp::matrix_view<std::int64_t const>(raw_ids.data(), static_cast<std::int64_t>(raw_ids.size()), 1),
        cp::matrix_view<std::int64_t>(labels.data(), p.local_rows(), 1), std::span<std::int64_t const>(raw_mask),
        std::span<std::int64_t>(mask), pad_value);
    return std::pair{to_numpy(std::move(labels)), to_numpy(std::move(mask))};
  });
}

}  // namespace

void bind_cp(nb::module_& m) {
  nb::module_ sub = m.def_submodule("cp", "headroom::cp");

  sub.def(
      "alignment_for",
      [](str_arg layout, int_arg cp, int_arg tp, int_arg extra) {
        int const c = as_int(cp, "cp"), t = as_int(tp, "tp");
        std::int64_t const e = as_i64(extra, "extra");
        return with_layout(layout_of(layout), [&](auto tag) { return cp::alignment_for<decltype(tag)>(c, t, e); });
      },
      nb::arg("layout"), nb::arg("cp"), nb::arg("tp") = 1, nb::arg("extra") = 1,
      "Per-sequence padding multiple of a layout at CP size cp (and TP size tp, extra multiple).");
  sub.def(
      "total_multiple",
      [](str_arg layout, int_arg cp) {
        int const c = as_int(cp, "cp");
        expects(c >= 1, "cp = ", c, "; expected >= 1");
        return with_layout(layout_of(layout), [&](auto tag) { return decltype(tag)::total_multiple(c); });
      },
      nb::arg("layout"), nb::arg("cp"), "The multiple a layout needs the packed total to be.");

  nb::class_<cp::padding>(sub, "Padding", "Raw packed boundaries -> padded ones every layout can cut evenly.")
      .def(
          "__init__",
          [](cp::padding* self, int_list_arg raw, int_arg sequence_multiple, int_arg total_multiple) {
            new (self) cp::padding(as_i64_vector(raw, "raw cu_seqlens"), as_i64(sequence_multiple, "sequence_multiple"),
                                   as_i64(total_multiple, "total_multiple"));
          },
          nb::arg("raw_cu_seqlens"), nb::arg("sequence_multiple"), nb::arg("total_multiple") = 1)
      .def_prop_ro("raw_rows", &cp::padding::raw_rows)
      .def_prop_ro("padded_rows", &cp::padding::padded_rows)
      .def_prop_ro("sequences", &cp::padding::sequences)
      .def_prop_ro("raw_sequences", &cp::padding::raw_sequences)
      .def_prop_ro("has_dummy_sequence", &cp::padding::has_dummy_sequence)
      .def_prop_ro("pad_rows", &cp::padding::pad_rows)
      .def_prop_ro("sequence_multiple", &cp::padding::sequence_multiple)
      .def_prop_ro(
          "raw_cu_seqlens", [](cp::padding const& p) { return to_numpy(p.raw_cu_seqlens()); }, nb::rv_policy::move)
      .def_prop_ro(
          "padded_cu_seqlens", [](cp::padding const& p) { return to_numpy(p.padded_cu_seqlens()); },
          nb::rv_policy::move)
      .def(
          "raw_to_padded", [](cp::padding const& p) { return to_numpy(p.raw_to_padded()); },
          "Padded row of every raw row.")
      .def(
          "padded_to_raw", [](cp::padding const& p) { return to_numpy(p.padded_to_raw()); },
          "Raw row of every padded row, -1 for pads.")
      .def(
          "padded_row", [](cp::padding const& p, int_arg r) { return p.padded_row(as_i64(r, "raw row")); },
          nb::arg("raw_row"))
      .def(
          "raw_row", [](cp::padding const& p, int_arg r) { return p.raw_row(as_i64(r, "padded row")); },
          nb::arg("padded_row"), "Raw row of a padded row, or -1 for a pad.")
      .def("__repr__", &cp::padding::describe);

  nb::class_<any_partition>(sub, "Partition", "One CP rank's share of a packed, padded batch.")
      .def(
          "__init__",
          [](any_partition* self, int_list_arg cu, int_arg cp_size, int_arg cp_rank, str_arg layout) {
            new (self) any_partition(make_partition(as_i64_vector(cu, "padded cu_seqlens"), as_int(cp_size, "cp_size"),
                                                    as_int(cp_rank, "cp_rank"), layout_of(layout)));
          },
          nb::arg("padded_cu_seqlens"), nb::arg("cp_size"), nb::arg("cp_rank"), nb::arg("layout") = "dual_chunk")
      .def_prop_ro("layout", [](any_partition const& a) { return std::string(layout_name(a)); })
      .def_prop_ro("cp_size", [](any_partition const& a) { return a.visit([](auto const& p) { return p.cp_size(); }); })
      .def_prop_ro("cp_rank", [](any_partition const& a) { return a.visit([](auto const& p) { return p.cp_rank(); }); })
      .def_prop_ro("sequences",
                   [](any_partition const& a) { return a.visit([](auto const& p) { return p.sequences(); }); })
      .def_prop_ro("global_rows",
                   [](any_partition const& a) { return a.visit([](auto const& p) { return p.global_rows(); }); })
      .def_prop_ro("local_rows",
                   [](any_partition const& a) { return a.visit([](auto const& p) { return p.local_rows(); }); })
      .def_prop_ro("longest_sequence",
                   [](any_partition const& a) { return a.visit([](auto const& p) { return p.longest_sequence(); }); })
      .def_prop_ro(
          "global_cu_seqlens",
          [](any_partition const& a) { return a.visit([](auto const& p) { return to_numpy(p.global_cu_seqlens()); }); },
          nb::rv_policy::move)
      .def_prop_ro(
          "local_cu_seqlens",
          [](any_partition const& a) { return a.visit([](auto const& p) { return to_numpy(p.local_cu_seqlens()); }); },
          nb::rv_policy::move)
      .def(
          "for_rank",
          [](any_partition const& a, int_arg r) {
            int const rank = as_int(r, "rank");
            return a.visit([&](auto const& p) { return any_partition{p.for_rank(rank)}; });
          },
          nb::arg("rank"), "The same batch seen from another rank.")
      .def(
          "locate",
          [](any_partition const& a, int_arg row, nb::typed<nb::handle, int> rank) {
            std::int64_t const t = as_i64(row, "local row");
            return a.visit([&](auto const& p) {
              auto const l = rank.is_none() ? p.locate(t) : p.locate(as_int(rank, "rank"), t);
              return std::tuple{l.global_row, l.sequence};
            });
          },
          nb::arg("local_row"), nb::arg("rank") = nb::none(), "(global row, sequence) of a local row.")
      .def(
          "owner",
          [](any_partition const& a, int_arg row) {
            std::int64_t const g = as_i64(row, "global row");
            return a.visit([&](auto const& p) {
              auto const o = p.owner(g);
              return std::tuple{o.rank, o.local_row};
            });
          },
          nb::arg("global_row"), "(rank, local row) holding a global row.")
      .def(
          "local_index",
          [](any_partition const& a) { return a.visit([](auto const& p) { return to_numpy(p.local_index()); }); },
          "Global padded row of every local row: local = global.index_select(0, local_index).")
      .def(
          "gather_index",
          [](any_partition const& a) { return a.visit([](auto const& p) { return to_numpy(p.gather_index()); }); },
          "Row of the rank-major all-gather output for every global row: "
          "sequence_order = gathered.index_select(0, gather_index).")
      .def(
          "fingerprint",
          [](any_partition const& a, int_arg width, int_arg element_bytes) {
            std::int64_t const w = as_i64(width, "width"), e = as_i64(element_bytes, "element_bytes");
            expects(w >= 0 && e >= 1, "width = ", w, ", element_bytes = ", e, "; expected width >= 0 and element_bytes >= 1");
            return a.visit([&](auto const& p) { return cp::detail::batch_fingerprint(p, w, static_cast<std::size_t>(e)); });
          },
          nb::arg("width"), nb::arg("element_bytes"),
          "What every rank of one gather must share (layout, cp size, boundaries, row width, element size) as one "
          "non-negative int64: the number the C++ host gather agrees on before moving data.")
      .def("same_batch",
           [](any_partition const& a, any_partition const& b) {
             return a.p.index() == b.p.index() &&
                    a.visit([&](auto const& p) { return p.same_batch(std::get<std::decay_t<decltype(p)>>(b.p)); });
           })
      .def("__repr__", [](any_partition const& a) { return a.visit([](auto const& p) { return p.describe(); }); });

  sub.def(
      "pad_split_index",
      [](cp::padding const& pd, any_partition const& a) {
        std::vector<std::int64_t> const raw = iota(pd.raw_rows());
        return a.visit([&](auto const& p) {
          std::vector<std::int64_t> out(static_cast<std::size_t>(p.local_rows()));
          cp::pad_split(pd, p, cp::matrix_view<std::int64_t const>(raw.data(), pd.raw_rows(), 1),
                        cp::matrix_view<std::int64_t>(out.data(), p.local_rows(), 1), std::int64_t{-1});
          return to_numpy(std::move(out));
        });
      },
      nb::arg("padding"), nb::arg("partition"),
      "Raw row of every local row of the padded batch, -1 for pads (cp::pad_split on row numbers).");
  sub.def(
      "shifted_labels",
      [](cp::padding const& pd, any_partition const& a, nb::typed<nb::handle, std::vector<std::int64_t>> raw_ids,
         nb::typed<nb::handle, std::vector<std::int64_t>> raw_loss_mask, int_arg pad_value) {
        std::vector<std::int64_t> const ids =
            raw_ids.is_none() ? iota(pd.raw_rows()) : as_i64_vector(raw_ids, "raw ids");
        std::vector<std::int64_t> const mask =
            raw_loss_mask.is_none() ? std::vector<std::int64_t>{} : as_i64_vector(raw_loss_mask, "raw loss mask");
        return shifted_labels(pd, a, ids, mask, as_i64(pad_value, "pad_value"));
      },
      nb::arg("padding"), nb::arg("partition"), nb::arg("raw_ids") = nb::none(), nb::arg("raw_loss_mask") = nb::none(),
      nb::arg("pad_value") = -1,
      "(labels, loss mask) of this rank's rows (cp::shifted_label_split). Without raw_ids the labels are raw row "
      "numbers (an index plan: -1 where the label is a pad).");
}

}  // namespace headroom::python
