# SPDX-License-Identifier: Apache-2.0
# ctest headers_umbrella: headroom/headroom.hpp includes every CUDA-free public header (but those
# marked "// headroom: included by name") and pulls no CUDA, NCCL or MPI header. The compiler
# lists what the umbrella really includes (-M), so a header added without an umbrella line, or a
# CUDA include slipped into the core, fails here.
#   cmake -DCXX=<c++ compiler> -DINCLUDE_DIR=<repo>/include -P check_umbrella.cmake
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/classify.cmake")

foreach(var CXX INCLUDE_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_umbrella.cmake: -D${var}=... is required")
  endif()
endforeach()

set(umbrella "${INCLUDE_DIR}/headroom/headroom.hpp")
execute_process(COMMAND "${CXX}" -std=c++20 "-I${INCLUDE_DIR}" -M -x c++ "${umbrella}"
                OUTPUT_VARIABLE deps ERROR_VARIABLE errors RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${CXX} -M ${umbrella} failed (${rc}):\n${errors}")
endif()
# Make output: "headroom.o: a.hpp b.hpp \<newline> c.hpp ..." -> a list of normalised paths.
string(REGEX REPLACE "\\\\\n" " " deps "${deps}")
string(REGEX REPLACE "^[^:]*:" "" deps "${deps}")
separate_arguments(deps UNIX_COMMAND "${deps}")
set(reached "")
set(problems "")
foreach(dep IN LISTS deps)
  cmake_path(NORMAL_PATH dep)
  cmake_path(IS_PREFIX INCLUDE_DIR "${dep}" NORMALIZE inside)
  if(inside)
    file(RELATIVE_PATH rel "${INCLUDE_DIR}" "${dep}")
    headroom_header_needs("${rel}" needs)
    if(needs)
      list(APPEND problems "headroom.hpp includes ${rel}, which needs ${needs}")
    endif()
    list(APPEND reached "${rel}")
  elseif(dep MATCHES "(^|/)(cuda[^/]*|nccl[^/]*|mpi[^/]*|cub|thrust|nv[^/]*)(/|\\.h)")
    list(APPEND problems "headroom.hpp pulls ${dep} (a CUDA, NCCL or MPI header)")
  endif()
endforeach()

headroom_public_headers("${INCLUDE_DIR}" headers)
set(checked 0)
foreach(header IN LISTS headers)
  headroom_header_needs("${header}" needs)
  if(needs)
    continue()
  endif()
  # A header whose contract says so is included by name (a data table, like pool/models.hpp).
  file(STRINGS "${INCLUDE_DIR}/${header}" by_name REGEX "^// headroom: included by name" LIMIT_COUNT 1)
  if(by_name)
    if(header IN_LIST reached)
      list(APPEND problems "headroom.hpp reaches ${header}, which says it is included by name only")
    endif()
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  if(NOT header IN_LIST reached)
    string(REGEX REPLACE "^headroom/([^/]+)/.*" "headroom/\\1.hpp" module_umbrella "${header}")
    list(APPEND problems "headroom.hpp does not reach ${header}: include it from ${module_umbrella}, \
and that from headroom/headroom.hpp")
  endif()
endforeach()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "umbrella check failed:\n  ${text}")
endif()
message(STATUS "headroom.hpp reaches all ${checked} CUDA-free headers and no CUDA, NCCL or MPI header")
