# SPDX-License-Identifier: Apache-2.0
# Build rules for headroom's own programs: tests, examples, the demo and benchmarks.
# Files are discovered by glob (docs/CONTRIBUTING.md), so adding a file needs no CMake edit:
#
#   tests/<module>/<name>.cpp      test_<module>_<name>        ctest label host
#   tests/<module>/mpi_<name>.cpp  test_<module>_mpi_<name>    mpiexec -n 4, label mpi
#   tests/<module>/<name>.cu       test_<module>_<name>        label gpu
#   tests/<module>/mpi_<name>.cu   test_<module>_mpi_<name>    mpiexec -n 2, labels gpu;mpi
#   examples/demo/*.cpp            headroom-demo               ctest test "demo", label host
#   bench/<name>.cpp | .cu         bench_<name>                not a test
#
# A source with the line "// headroom: needs N GPUs" runs through tools/gpus-at-least N: skipped
# (ctest SKIP_RETURN_CODE 77; gpu-check's run step likewise) on a machine with fewer GPUs.
#
# A directory under tests/ that has its own CMakeLists.txt is a separate project (tests/consumer),
# not a module. examples/<name>.cpp | .cu are built by examples/CMakeLists.txt (which also builds
# them standalone against an installed headroom), through headroom_add_program. .cu programs link
# headroom::cuda, headroom::nccl (when enabled) and CUDA::cublas.
include_guard(GLOBAL)

# Warnings for headroom's own programs (not exported: consumers pick their own).
add_library(headroom_warnings INTERFACE)
target_compile_options(headroom_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror>
  # nvcc: -Werror=all-warnings turns nvcc's and the host compiler's warnings into errors.
  # -Wpedantic is left out for CUDA: nvcc's generated host code uses GCC line directives.
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -Werror=all-warnings>)
# g++ 12 at -O3 reports -Wrestrict inside libstdc++ for `"literal" + std::string&&` (a false
# positive, GCC bugs 105329 / 105651, gone in 13); it fired on tests and examples in CI. Off for
# g++ < 13 only, host and nvcc's host pass (which uses the same g++ here).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(headroom_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>
                                                     $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wno-restrict>)
endif()

# Sanitizers (HEADROOM_SANITIZE) for host programs; CUDA programs never get them.
add_library(headroom_sanitize INTERFACE)
if(HEADROOM_SANITIZE)
  set(_headroom_san_flags -fsanitize=${HEADROOM_SANITIZE} -fno-omit-frame-pointer)
  if(HEADROOM_SANITIZE MATCHES "undefined")
    list(APPEND _headroom_san_flags -fno-sanitize-recover=undefined)
  endif()
  target_compile_options(headroom_sanitize INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_headroom_san_flags}>
    # GCC's -Wmaybe-uninitialized gives false positives in sanitized code (e.g. inside std::regex
    # and std::function with g++ 12); the unsanitized builds keep the warning.
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-maybe-uninitialized>)
  target_link_options(headroom_sanitize INTERFACE $<$<LINK_LANGUAGE:CXX>:${_headroom_san_flags}>)
endif()

# Defaults for the CUDA language, set before enable_language(CUDA).
macro(headroom_prepare_cuda_language)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures of headroom's .cu programs" FORCE)
  endif()
  if(NOT CMAKE_CUDA_HOST_COMPILER AND NOT DEFINED ENV{CUDAHOSTCXX})
    # nvcc's host compiler is g++: the C++ compiler when it is GCC, else g++ from PATH.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      set(_headroom_gxx "${CMAKE_CXX_COMPILER}")
    else()
      find_program(_headroom_gxx NAMES g++ REQUIRED)
    endif()
    set(CMAKE_CUDA_HOST_COMPILER "${_headroom_gxx}" CACHE FILEPATH "Host compiler of nvcc")
  endif()
endmacro()

# Extra mpiexec flags: Open MPI refuses to run as root (CI does) and to start more ranks than
# cores (CI has two) unless told.
if(HEADROOM_ENABLE_MPI AND NOT DEFINED HEADROOM_MPIEXEC_FLAGS)
  set(_headroom_mpiexec_flags "")
  if(MPIEXEC_EXECUTABLE)
    execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version OUTPUT_VARIABLE _out ERROR_VARIABLE _out
                    RESULT_VARIABLE _rc TIMEOUT 20)
    if(_out MATCHES "Open MPI|OpenRTE")
      set(_headroom_mpiexec_flags --allow-run-as-root --oversubscribe)
    endif()
  endif()
  set(HEADROOM_MPIEXEC_FLAGS "${_headroom_mpiexec_flags}" CACHE STRING
      "Flags headroom passes to mpiexec before the program (after MPIEXEC_PREFLAGS)")
endif()

# headroom_add_program(<target> SOURCES <file>... [DOCTEST] [TEST <name>] [LABELS <label>...]
#                      [MPI_RANKS <n>])
# One executable. A .cu source makes it a CUDA program. TEST registers it with ctest (under
# mpiexec -n <n> when MPI_RANKS is given).
function(headroom_add_program target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "DOCTEST" "TEST;MPI_RANKS" "SOURCES;LABELS")
  add_executable(${target} ${arg_SOURCES})
  set(is_cuda FALSE)
  foreach(src IN LISTS arg_SOURCES)
    if(src MATCHES "\\.cu$")
      set(is_cuda TRUE)
    endif()
  endforeach()
  # C++20 comes from headroom::core (cxx_std_20); -std=c++20 rather than gnu++20. CXX_STANDARD is
  # not set: CMake would apply it to CUDA sources too, and 3.25 has no nvcc flag for CUDA20.
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  target_compile_definitions(${target} PRIVATE HEADROOM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  target_link_libraries(${target} PRIVATE headroom::core headroom_warnings)
  if(is_cuda)
    # C++20 for nvcc comes from headroom::cuda (CMake 3.25 has no CUDA_STANDARD 20 for nvcc).
    target_link_libraries(${target} PRIVATE headroom::cuda CUDA::cublas)
    if(TARGET headroom-cuda-programs)
      add_dependencies(headroom-cuda-programs ${target})
    endif()
    if(HEADROOM_ENABLE_NCCL)
      target_link_libraries(${target} PRIVATE headroom::nccl)
    endif()
  else()
    target_link_libraries(${target} PRIVATE headroom_sanitize)
    # Sanitizer builds compile at -O0 (the asan and tsan presets): instrumented -O1 code costs g++
    # and clang++ 2.5-3x the compile time on the 2-core CI machine. A program whose runtime is
    # what matters there (a property grid of thousands of plans) says so in its source,
    #   // headroom: optimised under sanitizers
    # and keeps -O1.
    if(HEADROOM_SANITIZE)
      foreach(src IN LISTS arg_SOURCES)
        file(STRINGS "${src}" marker REGEX "^// headroom: optimised under sanitizers" LIMIT_COUNT 1)
        if(marker)
          target_compile_options(${target} PRIVATE -O1)
        endif()
      endforeach()
    endif()
  endif()
  if(arg_DOCTEST)
    # doctest's runner (its implementation and main) is compiled once per build, not per test.
    if(NOT TARGET headroom_doctest_main)
      add_library(headroom_doctest_main STATIC "${PROJECT_SOURCE_DIR}/tests/common/doctest_main.cpp")
      set_target_properties(headroom_doctest_main PROPERTIES CXX_EXTENSIONS OFF)
      target_link_libraries(headroom_doctest_main PUBLIC doctest::doctest PRIVATE headroom::core headroom_warnings
                                                                                  headroom_sanitize)
    endif()
    target_link_libraries(${target} PRIVATE headroom_doctest_main)
    target_include_directories(${target} PRIVATE "${PROJECT_SOURCE_DIR}/tests")
  endif()
  if(arg_MPI_RANKS)
    target_link_libraries(${target} PRIVATE headroom::mpi)
  endif()

  if(arg_TEST)
    # "// headroom: needs N GPUs" in a source: on a machine with fewer, the test is skipped
    # (tools/gpus-at-least exits 77) instead of failing on a missing device.
    set(gpus "")
    foreach(src IN LISTS arg_SOURCES)
      file(STRINGS "${src}" marker REGEX "^// headroom: needs [0-9]+ GPUs" LIMIT_COUNT 1)
      if(marker MATCHES "needs ([0-9]+) GPUs")
        set(gpus ${CMAKE_MATCH_1})
      endif()
    endforeach()
    set(launcher "")
    if(gpus)
      set(launcher "${PROJECT_SOURCE_DIR}/tools/gpus-at-least" ${gpus})
    endif()
    if(arg_MPI_RANKS)
      add_test(NAME ${arg_TEST}
               COMMAND ${launcher} "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} ${arg_MPI_RANKS}
                       ${MPIEXEC_PREFLAGS} ${HEADROOM_MPIEXEC_FLAGS}
                       $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS})
      set_tests_properties(${arg_TEST} PROPERTIES PROCESSORS ${arg_MPI_RANKS})
    else()
      add_test(NAME ${arg_TEST} COMMAND ${launcher} $<TARGET_FILE:${target}>)
    endif()
    set_tests_properties(${arg_TEST} PROPERTIES LABELS "${arg_LABELS}" TIMEOUT ${HEADROOM_TEST_TIMEOUT})
    if(gpus)
      set_tests_properties(${arg_TEST} PROPERTIES SKIP_RETURN_CODE 77)
    endif()
  endif()
endfunction()

# headroom_collect_programs(<var>): globs the sources of the enabled kinds of programs.
# Sets <var>_TESTS, <var>_DEMO, <var>_BENCH and <var>_HAVE_CUDA (TRUE when a .cu file would be
# built) in the caller's scope.
function(headroom_collect_programs var)
  set(root "${PROJECT_SOURCE_DIR}")
  set(tests "")
  set(demo "")
  set(bench "")
  if(HEADROOM_ENABLE_TESTS)
    file(GLOB candidates CONFIGURE_DEPENDS "${root}/tests/*/*.cpp" "${root}/tests/*/*.cu")
    foreach(src IN LISTS candidates)
      get_filename_component(dir "${src}" DIRECTORY)
      # tests/common holds what the tests share (the doctest runner, helpers), not tests.
      if(NOT EXISTS "${dir}/CMakeLists.txt" AND NOT dir STREQUAL "${root}/tests/common")  # a separate project is no module
        list(APPEND tests "${src}")
      endif()
    endforeach()
  endif()
  if(HEADROOM_ENABLE_EXAMPLES)
    file(GLOB demo CONFIGURE_DEPENDS "${root}/examples/demo/*.cpp")
  endif()
  if(HEADROOM_ENABLE_BENCH)
    file(GLOB bench CONFIGURE_DEPENDS "${root}/bench/*.cpp" "${root}/bench/*.cu")
  endif()
  set(have_cuda FALSE)
  foreach(src IN LISTS tests bench)
    if(src MATCHES "\\.cu$")
      set(have_cuda TRUE)
    endif()
  endforeach()
  set(${var}_TESTS "${tests}" PARENT_SCOPE)
  set(${var}_DEMO "${demo}" PARENT_SCOPE)
  set(${var}_BENCH "${bench}" PARENT_SCOPE)
  set(${var}_HAVE_CUDA ${have_cuda} PARENT_SCOPE)
endfunction()

# headroom_add_programs(<var>): creates the programs headroom_collect_programs(<var>) found.
# Programs whose substrate is disabled (.cu without CUDA, mpi_* without MPI) are skipped, and
# the count is reported.
function(headroom_add_programs var)
  # Builds every CUDA program and nothing else (the gpu-build preset: compile and link in CI).
  add_custom_target(headroom-cuda-programs)
  set(skipped_cuda 0)
  set(skipped_mpi 0)

  foreach(src IN LISTS ${var}_TESTS)
    get_filename_component(name "${src}" NAME_WE)
    get_filename_component(ext "${src}" LAST_EXT)
    get_filename_component(dir "${src}" DIRECTORY)
    get_filename_component(module "${dir}" NAME)
    set(target test_${module}_${name})
    set(ranks "")
    if(ext STREQUAL ".cu")
      set(labels gpu)
      if(NOT HEADROOM_ENABLE_CUDA)
        math(EXPR skipped_cuda "${skipped_cuda} + 1")
        continue()
      endif()
      if(name MATCHES "^mpi_")
        set(labels gpu mpi)
        set(ranks 2)
      endif()
    elseif(name MATCHES "^mpi_")
      set(labels mpi)
      set(ranks 4)
    else()
      set(labels host)
    endif()
    if(ranks AND NOT HEADROOM_ENABLE_MPI)
      math(EXPR skipped_mpi "${skipped_mpi} + 1")
      continue()
    endif()
    headroom_add_program(${target} SOURCES "${src}" DOCTEST TEST ${target} LABELS ${labels} MPI_RANKS ${ranks})
  endforeach()

  # trace: Python's pickle reads the snapshots test_trace_snapshots writes, as memory_viz would.
  if(TARGET test_trace_snapshots)
    find_package(Python3 COMPONENTS Interpreter)
    if(Python3_Interpreter_FOUND)
      set(dir "${PROJECT_BINARY_DIR}/trace_snapshots")
      set_tests_properties(test_trace_snapshots PROPERTIES ENVIRONMENT "HEADROOM_TRACE_SNAPSHOT_DIR=${dir}"
                           FIXTURES_SETUP trace_snapshots)
      add_test(NAME trace_check_snapshot
               COMMAND "${Python3_EXECUTABLE}" "${PROJECT_SOURCE_DIR}/tests/trace/check_snapshot.py" "${dir}")
      set_tests_properties(trace_check_snapshot PROPERTIES LABELS host FIXTURES_REQUIRED trace_snapshots
                           TIMEOUT ${HEADROOM_TEST_TIMEOUT})
      # The same files in PyTorch's viewer (MemoryViz.js in headless Chromium); skipped (77, with the
      # reason) where the viewer copy, chromium or node-d3 is missing. Not in sanitizer builds: the
      # files are the same, and the check takes a minute.
      if(NOT HEADROOM_SANITIZE)
        add_test(NAME trace_viewer_check
                 COMMAND "${Python3_EXECUTABLE}" "${PROJECT_SOURCE_DIR}/tests/trace/viewer_check.py" "${dir}")
        set_tests_properties(trace_viewer_check PROPERTIES LABELS host FIXTURES_REQUIRED trace_snapshots
                             SKIP_RETURN_CODE 77 TIMEOUT ${HEADROOM_TEST_TIMEOUT})
      endif()
    endif()
  endif()

  if(${var}_DEMO)
    headroom_add_program(headroom-demo SOURCES ${${var}_DEMO} TEST demo LABELS host)
  endif()

  foreach(src IN LISTS ${var}_BENCH)
    get_filename_component(name "${src}" NAME_WE)
    if(src MATCHES "\\.cu$" AND NOT HEADROOM_ENABLE_CUDA)
      math(EXPR skipped_cuda "${skipped_cuda} + 1")
      continue()
    endif()
    headroom_add_program(bench_${name} SOURCES "${src}")
  endforeach()

  if(skipped_cuda GREATER 0)
    message(STATUS "headroom: skipped ${skipped_cuda} CUDA program(s) (HEADROOM_ENABLE_CUDA=OFF)")
  endif()
  if(skipped_mpi GREATER 0)
    message(STATUS "headroom: skipped ${skipped_mpi} MPI test(s) (HEADROOM_ENABLE_MPI=OFF)")
  endif()
endfunction()
