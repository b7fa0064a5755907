// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom's version. Kept equal to project(VERSION) in CMakeLists.txt, conanfile.py and
// ports/headroom/vcpkg.json; tests/core/version.cpp checks that they agree.

#define HEADROOM_VERSION_MAJOR 0
#define HEADROOM_VERSION_MINOR 1
#define HEADROOM_VERSION_PATCH 0
#define HEADROOM_VERSION_STRING "0.1.0"
/// major * 10000 + minor * 100 + patch, for #if comparisons.
#define HEADROOM_VERSION (HEADROOM_VERSION_MAJOR * 10000 + HEADROOM_VERSION_MINOR * 100 + HEADROOM_VERSION_PATCH)

namespace headroom {

struct version_info {
  int major;
  int minor;
  int patch;
  char const* string;
};

inline constexpr version_info version{HEADROOM_VERSION_MAJOR, HEADROOM_VERSION_MINOR, HEADROOM_VERSION_PATCH,
                                      HEADROOM_VERSION_STRING};

}  // namespace headroom
