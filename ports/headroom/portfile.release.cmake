# Release variant of portfile.cmake: takes the sources of tag v${VERSION} from GitHub.
# To publish: set HEADROOM_REPO to the real owner/name, copy this file over portfile.cmake in
# the registry's ports/headroom/, run `vcpkg install headroom` once with SHA512 0 and put the
# hash vcpkg prints in its place.
set(HEADROOM_REPO "OWNER/headroom")  # the published repository
set(VCPKG_BUILD_TYPE release)        # header-only

vcpkg_from_github(
  OUT_SOURCE_PATH SOURCE_PATH
  REPO "${HEADROOM_REPO}"
  REF "v${VERSION}"
  SHA512 0
  HEAD_REF main
)

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda HEADROOM_ENABLE_CUDA
    nccl HEADROOM_ENABLE_NCCL
    mpi  HEADROOM_ENABLE_MPI
)

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
