// SPDX-License-Identifier: Apache-2.0
// cp::gather_adjoint sums gradients across ranks, so its element type must be arithmetic.
// expect: cp::gather_adjoint: the element type T is not arithmetic
#include <cstddef>

#include "headroom/cp.hpp"
#include "headroom/host/thread_group.hpp"

namespace cp = headroom::cp;

#ifdef HEADROOM_TWIN
using element = float;
#else
using element = std::byte;
#endif
void backward(headroom::host::thread_communicator& comm, cp::partition<> const& p, cp::matrix_view<element const> dy,
              cp::matrix_view<element> dx, cp::matrix_view<element> workspace) {
  cp::gather_adjoint(comm, p, dy, dx, workspace);
}
