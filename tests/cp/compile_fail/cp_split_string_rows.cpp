// SPDX-License-Identifier: Apache-2.0
// cp::split on rows of a type that is not trivially copyable.
// expect: is not a cp::row_element (trivially copyable, not const or volatile)
#include <cstdint>
#include <string>

#include "headroom/cp.hpp"

namespace cp = headroom::cp;

#ifdef HEADROOM_TWIN
using element = std::int64_t;
#else
using element = std::string;
#endif
void split_rows(cp::partition<> const& p, cp::matrix_view<element const> global, cp::matrix_view<element> local) {
  cp::split(p, global, local);
}
