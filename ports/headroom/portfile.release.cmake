# SPDX-License-Identifier: Apache-2.0
# Release variant of portfile.cmake: takes the sources of tag v${VERSION} from GitHub.
# To publish: set HEADROOM_REPO to the real owner/name, copy this file over portfile.cmake in
# the registry's ports/headroom/ (beside build.cmake, usage and vcpkg.json), run
# `vcpkg install headroom` once with SHA512 0 and put the hash vcpkg prints in its place.
set(HEADROOM_REPO "OWNER/headroom")  # the published repository
set(VCPKG_BUILD_TYPE release)        # header-only

vcpkg_from_github(
  OUT_SOURCE_PATH SOURCE_PATH
  REPO "${HEADROOM_REPO}"
  REF "v${VERSION}"
  SHA512 0
  HEAD_REF main
)
include("${CMAKE_CURRENT_LIST_DIR}/build.cmake")
