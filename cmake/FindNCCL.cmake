# SPDX-License-Identifier: Apache-2.0
# FindNCCL
# --------
# Finds the NVIDIA Collective Communications Library. NCCL ships no CMake package; it is often
# installed inside the CUDA toolkit's own include/ and lib/ directories, so the search is hinted
# by the CUDA toolkit (found here with FindCUDAToolkit if the caller has not done so).
#
# Hints (CMake or environment variables): NCCL_ROOT, NCCL_HOME, NCCL_INCLUDE_DIR, NCCL_LIB_DIR,
# then the CUDA toolkit directories, then the system paths.
#
# Result: NCCL_FOUND, NCCL_VERSION (from nccl.h), NCCL_INCLUDE_DIRS, NCCL_LIBRARIES and the
# imported targets NCCL::nccl and NCCL::NCCL (the same library, both spellings are in use).
include(FindPackageHandleStandardArgs)

if(NOT CUDAToolkit_FOUND)
  find_package(CUDAToolkit QUIET)
endif()

set(_nccl_hints "")
foreach(_v IN ITEMS NCCL_ROOT NCCL_HOME)
  if(DEFINED ${_v})
    list(APPEND _nccl_hints "${${_v}}")
  endif()
  if(DEFINED ENV{${_v}})
    list(APPEND _nccl_hints "$ENV{${_v}}")
  endif()
endforeach()

find_path(NCCL_INCLUDE_DIR NAMES nccl.h
  HINTS ${_nccl_hints} $ENV{NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl
  HINTS ${_nccl_hints} $ENV{NCCL_LIB_DIR} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu)
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

unset(NCCL_VERSION)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_defines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part IN ITEMS MAJOR MINOR PATCH)
    string(REGEX MATCH "#define NCCL_${_part} +([0-9]+)" _m "${_nccl_defines}")
    set(NCCL_VERSION_${_part} "${CMAKE_MATCH_1}")
  endforeach()
  if(NOT NCCL_VERSION_MAJOR STREQUAL "")
    set(NCCL_VERSION "${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}.${NCCL_VERSION_PATCH}")
  endif()
endif()

find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  VERSION_VAR NCCL_VERSION)

if(NCCL_FOUND)
  set(NCCL_INCLUDE_DIRS "${NCCL_INCLUDE_DIR}")
  set(NCCL_LIBRARIES "${NCCL_LIBRARY}")
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
  if(NOT TARGET NCCL::NCCL)
    add_library(NCCL::NCCL INTERFACE IMPORTED)
    target_link_libraries(NCCL::NCCL INTERFACE NCCL::nccl)
  endif()
endif()
unset(_nccl_hints)
unset(_nccl_defines)
