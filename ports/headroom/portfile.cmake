# SPDX-License-Identifier: Apache-2.0
# Overlay port that installs headroom from this source tree (the checkout that holds ports/):
#   vcpkg install "headroom[cuda,nccl,mpi]" --overlay-ports=<checkout>/ports
# vcpkg's ABI hash does not see edits to the source tree: `vcpkg remove headroom` to reinstall.
# For a published release use portfile.release.cmake (vcpkg_from_github) instead.
# tools/vcpkg-check runs this port (docs/install.md has the recorded run).
set(VCPKG_BUILD_TYPE release)  # header-only
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../..")
include("${CMAKE_CURRENT_LIST_DIR}/build.cmake")
