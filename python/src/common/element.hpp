// SPDX-License-Identifier: Apache-2.0
#pragma once
// The element types of both extension modules' row ops (headroom._cuda's launches,
// headroom._torch_ops's host ops): the ops move rows of `width` elements without looking at
// them, so an element is opaque bytes and one instantiation per size (1, 2, 4, 8, 16: every torch
// dtype's itemsize) serves every dtype of that size.
#include <concepts>
#include <cstddef>

#include "headroom/core/error.hpp"

namespace headroom::python {

template <std::size_t N>
struct element {
  unsigned char bytes[N];
};

/// Calls f(element<elem_bytes>{}); throws invalid_argument naming `op` and the size for any other
/// size.
template <std::integral I, class F>
void with_element(I elem_bytes, char const* op, F&& f) {
  switch (elem_bytes) {
    case 1: return f(element<1>{});
    case 2: return f(element<2>{});
    case 4: return f(element<4>{});
    case 8: return f(element<8>{});
    case 16: return f(element<16>{});
    default:
      throw invalid_argument(headroom::detail::concat(op, ": elements of ", elem_bytes,
                                                      " bytes, expected 1, 2, 4, 8 or 16 (a torch dtype's itemsize)"));
  }
}

}  // namespace headroom::python
