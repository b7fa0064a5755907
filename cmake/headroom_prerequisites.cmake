# SPDX-License-Identifier: Apache-2.0
# Included by CMakeLists.txt before project(), so that on a fresh machine the first thing
# configure prints is what is missing and the one line that installs it: the line README.md's
# "Try it" starts with (.ci/run checks that the two agree). Checks only what a top-level
# build needs and CMake would otherwise report late or obscurely: the Ninja program, a C++
# compiler, and doctest when the tests are on.
include_guard(GLOBAL)

set(HEADROOM_INSTALL_LINE "sudo apt-get update && sudo apt-get install -y cmake ninja-build g++ doctest-dev python3-venv python3-dev")

# headroom_require(<missing>...): stops configure, naming what is missing and the install line.
function(headroom_require)
  list(JOIN ARGN ", " missing)
  message(FATAL_ERROR
    "headroom: missing ${missing}. On Debian 12 / Ubuntu 24.04, install everything the presets need with:\n"
    "  ${HEADROOM_INSTALL_LINE}\n"
    "(or configure with -DHEADROOM_ENABLE_TESTS=OFF to build without the tests, as the demo preset does).")
endfunction()

function(headroom_check_prerequisites)
  set(missing "")
  if(CMAKE_GENERATOR MATCHES "^Ninja" AND NOT CMAKE_MAKE_PROGRAM)
    find_program(HEADROOM_NINJA_PROGRAM NAMES ninja-build ninja samu)
    if(NOT HEADROOM_NINJA_PROGRAM)
      list(APPEND missing "the Ninja build tool (Debian package ninja-build)")
    endif()
  endif()
  if(NOT CMAKE_CXX_COMPILER AND NOT DEFINED ENV{CXX} AND NOT CMAKE_TOOLCHAIN_FILE)
    find_program(HEADROOM_CXX_PROGRAM NAMES c++ g++ clang++)
    if(NOT HEADROOM_CXX_PROGRAM)
      list(APPEND missing "a C++20 compiler (Debian package g++)")
    endif()
  endif()
  # Tests default to ON in a top-level build. A toolchain file (vcpkg, Conan) adds its search
  # paths only in project(), so doctest is then looked for after project() (CMakeLists.txt).
  set(tests ${HEADROOM_ENABLE_TESTS})
  if(NOT DEFINED HEADROOM_ENABLE_TESTS)
    string(COMPARE EQUAL "${CMAKE_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}" tests)
  endif()
  if(tests AND NOT CMAKE_TOOLCHAIN_FILE)
    find_package(doctest 2.4 CONFIG QUIET)
    if(NOT doctest_FOUND)
      list(APPEND missing "doctest >= 2.4 for the tests (Debian package doctest-dev)")
    endif()
  endif()
  if(missing)
    headroom_require(${missing})
  endif()
endfunction()
