// SPDX-License-Identifier: Apache-2.0
// The one doctest runner every test program links (cmake/headroom_targets.cmake): doctest's
// implementation compiled once per build instead of once per test source. Test sources include
// <doctest/doctest.h> and define no main.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
