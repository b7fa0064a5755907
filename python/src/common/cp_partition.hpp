// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one CP partition type of the extension modules: headroom._core.cp.Partition binds it,
// headroom._cuda's launches (python/src/cuda/launch.hpp) take that object, and headroom._torch_ops's
// plans hold it; headroom::cp::partition in the layout named at run time. The layout name is read
// here and nowhere else: a name that is not a layout is an invalid_argument naming it and the
// layouts there are.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "headroom/core/error.hpp"
#include "headroom/cp/layout.hpp"
#include "headroom/cp/partition.hpp"

namespace headroom::python {

/// A partition of either layout.
struct any_partition {
  std::variant<cp::partition<cp::dual_chunk>, cp::partition<cp::contiguous>> p;

  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), p);
  }
};

/// f(layout tag) for the layout called `layout` ("dual_chunk" or "contiguous").
template <class F>
decltype(auto) with_layout(std::string_view layout, F&& f) {
  if (layout == cp::dual_chunk::name) return std::forward<F>(f)(cp::dual_chunk{});
  if (layout != cp::contiguous::name) {
    // A long name is cut in the message (first 100 and last 100 characters), as every binding's reprs are.
    std::string const shown = layout.size() <= 203
                                  ? std::string(layout)
                                  : std::string(layout.substr(0, 100)) + "..." + std::string(layout.substr(layout.size() - 100));
    expects(false, "layout = '", shown, "'; expected one of '", cp::dual_chunk::name, "', '", cp::contiguous::name, "'");
  }
  return std::forward<F>(f)(cp::contiguous{});
}

/// Rank cp_rank's share of the padded boundaries `padded_cu` in the layout called `layout`.
[[nodiscard]] inline any_partition make_partition(std::span<std::int64_t const> padded_cu, int cp_size, int cp_rank,
                                                  std::string_view layout) {
  return with_layout(layout, [&](auto tag) {
    return any_partition{cp::partition<decltype(tag)>(padded_cu, cp_size, cp_rank)};
  });
}

/// The name of a partition's layout.
[[nodiscard]] inline std::string_view layout_name(any_partition const& a) noexcept {
  return a.visit([](auto const& p) { return std::remove_cvref_t<decltype(p)>::layout_type::name; });
}

}  // namespace headroom::python
