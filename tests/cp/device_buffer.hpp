// SPDX-License-Identifier: Apache-2.0
#pragma once
// The cp GPU tests' names for the shared device buffers (tests/common/device_vector.hpp, where
// the legacy-stream ordering rule is kept).
#include "common/device_vector.hpp"

namespace cp_test {

using headroom_test::device_vector;
using headroom_test::same_bytes;

}  // namespace cp_test
