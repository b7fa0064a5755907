# SPDX-License-Identifier: Apache-2.0
# ctest headers_cxx17: a translation unit compiled as C++17 that includes headroom gets one
# message naming the flag (the #error of headroom/core/require_cxx20.hpp) and nothing else but
# the stop that follows it; and every public header includes that check first, so it holds
# whichever header a user includes.
#   cmake -DCXX=<compiler> -DINCLUDE_DIR=<repo>/include -DWORK_DIR=<dir> [-DLANG=CUDA] -P check_cxx17.cmake
# LANG=CUDA compiles a .cu with nvcc and no -std, as a CUDA code base does (nvcc's default is C++17).
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/classify.cmake")

foreach(var CXX INCLUDE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_cxx17.cmake: -D${var}=... is required")
  endif()
endforeach()

set(guard "headroom/core/require_cxx20.hpp")
set(problems "")
if(NOT LANG STREQUAL "CUDA")
  # Every header: `#pragma once`, then the guard, before any other include.
  headroom_public_headers("${INCLUDE_DIR}" headers)
  foreach(header IN LISTS headers)
    if(header STREQUAL guard)
      continue()
    endif()
    file(STRINGS "${INCLUDE_DIR}/${header}" includes REGEX "^[ \t]*#[ \t]*include")
    list(GET includes 0 first)
    if(NOT first MATCHES "^#include \"${guard}\"$")
      list(APPEND problems "${header}: its first include is '${first}', not \"${guard}\"")
    endif()
  endforeach()
endif()

# The probes: the umbrella, and a deep header included on its own (no umbrella in front of it).
file(MAKE_DIRECTORY "${WORK_DIR}")
if(LANG STREQUAL "CUDA")
  set(probes "headroom/cp/cuda.cuh" "headroom/pool/cuda.hpp")
  set(ext cu)
  set(std_flag "")
else()
  set(probes "headroom/headroom.hpp" "headroom/pool/plan.hpp" "headroom/pipeline/executor.hpp")
  set(ext cpp)
  set(std_flag -std=c++17)
endif()
foreach(probe IN LISTS probes)
  string(REGEX REPLACE "[/.]" "_" stem "${probe}")
  set(tu "${WORK_DIR}/${stem}.${ext}")
  file(WRITE "${tu}" "#include <${probe}>\nint main() { return 0; }\n")
  execute_process(COMMAND "${CXX}" ${std_flag} "-I${INCLUDE_DIR}" -c "${tu}" -o "${WORK_DIR}/${stem}.o"
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  set(all "${out}${err}")
  if(rc EQUAL 0)
    list(APPEND problems "${probe} compiled as C++17 without an error")
    continue()
  endif()
  # Diagnostics: lines with "error" after the file:line:col prefix (gcc, clang and nvcc alike).
  string(REGEX MATCHALL "[^\n]*:[0-9]+:[0-9]+: (fatal )?error:[^\n]*" errors "${all}")
  list(LENGTH errors count)
  list(GET errors 0 first)
  if(NOT first MATCHES "headroom needs C\\+\\+20: compile with -std=c\\+\\+20")
    list(APPEND problems "${probe}: the first error is not headroom's C++20 message:\n${all}")
  elseif(NOT count EQUAL 2)
    list(APPEND problems "${probe}: ${count} errors, expected the message and the stop after it:\n${all}")
  else()
    list(GET errors 1 second)
    if(NOT second MATCHES "fatal error:.*compilation stopped by the C\\+\\+20 check above")
      list(APPEND problems "${probe}: the second error is not the stop:\n${all}")
    endif()
  endif()
  message(STATUS "${probe} as C++17 (${CXX}): ${first}")
endforeach()

if(problems)
  list(JOIN problems "\n" text)
  message(FATAL_ERROR "C++17 check:\n${text}")
endif()
