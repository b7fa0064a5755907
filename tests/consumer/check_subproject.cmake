# SPDX-License-Identifier: Apache-2.0
# Included by the subdirectory/ and fetchcontent/ parent projects after headroom is added: a
# core-only parent must find headroom's targets, and headroom must have searched for nothing
# else (no CUDA compiler probe, no find_package of CUDAToolkit, NCCL or MPI: each of them leaves
# cache entries) and built none of its own programs.
foreach(t headroom::core headroom::cuda headroom::nccl headroom::mpi)
  if(NOT TARGET ${t})
    message(FATAL_ERROR "headroom as a subproject did not define ${t}")
  endif()
endforeach()
get_cmake_property(cache CACHE_VARIABLES)
set(searched "")
foreach(v IN LISTS cache)
  if(v MATCHES "(^|_)(CUDA|NCCL|MPI)" AND NOT v MATCHES "^HEADROOM_ENABLE_")
    list(APPEND searched ${v})
  endif()
endforeach()
if(searched OR CMAKE_CUDA_COMPILER OR DEFINED CUDAToolkit_FOUND OR DEFINED NCCL_FOUND OR DEFINED MPI_CXX_FOUND)
  message(FATAL_ERROR "headroom as a core-only subproject looked for CUDA, NCCL or MPI; cache entries: ${searched}")
endif()
foreach(option CUDA NCCL MPI TESTS EXAMPLES BENCH)
  if(HEADROOM_ENABLE_${option})
    message(FATAL_ERROR "HEADROOM_ENABLE_${option} is ON in a parent that did not ask for it")
  endif()
endforeach()
if(TARGET headroom-demo OR TARGET headroom_headers_core)
  message(FATAL_ERROR "headroom as a subproject defined its own programs")
endif()
message(STATUS "headroom as a subproject: core only, nothing else searched")
