# Overlay port that installs headroom from this source tree (the checkout that holds ports/):
#   vcpkg install "headroom[cuda,nccl,mpi]" --overlay-ports=<checkout>/ports
# vcpkg's ABI hash does not see edits to the source tree: `vcpkg remove headroom` to reinstall.
# For a published release use portfile.release.cmake (vcpkg_from_github) instead.
set(VCPKG_BUILD_TYPE release)  # header-only
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../..")

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
