# SPDX-License-Identifier: Apache-2.0
# The part of the port that both portfiles share: given SOURCE_PATH (this checkout, or the
# release sources), configure with the features, install, and ship the license and usage.

# Header-only: no ELF file to fix the RPATH of. Without this, vcpkg runs patchelf over every
# installed file it cannot rule out by name (.cuh headers, usage), which downloads patchelf.
set(VCPKG_FIXUP_ELF_RPATH OFF)
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda HEADROOM_ENABLE_CUDA
    nccl HEADROOM_ENABLE_NCCL
    mpi  HEADROOM_ENABLE_MPI
)

# Enabled features make the build look for (and so check) the CUDA toolkit, NCCL and MPI.
# The installed package holds all components either way; their dependencies are found when a
# consumer asks for them.
vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DHEADROOM_ENABLE_TESTS=OFF
    -DHEADROOM_ENABLE_EXAMPLES=OFF
    -DHEADROOM_ENABLE_BENCH=OFF
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/headroom)  # -> share/headroom

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/lib" "${CURRENT_PACKAGES_DIR}/debug")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
