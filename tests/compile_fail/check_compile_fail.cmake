# SPDX-License-Identifier: Apache-2.0
# ctest compile_fail: every snippet tests/<module>/compile_fail/*.cpp is a misuse of a public
# template that must stop the build with headroom's sentence, not with a bare concept failure.
#   cmake -DCXX=<compiler> -DINCLUDE_DIR=<repo>/include -DTESTS_DIR=<repo>/tests
#         -DERRORS_DOC=<repo>/docs/errors.md -DWORK_DIR=<dir> -P check_compile_fail.cmake
# A snippet holds `// expect: <text>` and an #ifdef HEADROOM_TWIN branch with the correct use.
# For each one:
#   - with -DHEADROOM_TWIN it compiles cleanly (warnings are errors): the misuse is the only fault;
#   - without it, compiling fails and the first error line holds <text> (the sentence comes
#     first, before any follow-on error);
#   - <text> appears in docs/errors.md, which lists the sentences.
cmake_minimum_required(VERSION 3.25)

foreach(var CXX INCLUDE_DIR TESTS_DIR ERRORS_DOC WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_compile_fail.cmake: -D${var}=... is required")
  endif()
endforeach()

file(GLOB snippets "${TESTS_DIR}/*/compile_fail/*.cpp")
if(NOT snippets)
  message(FATAL_ERROR "compile_fail: no snippets in ${TESTS_DIR}/*/compile_fail/")
endif()
file(READ "${ERRORS_DOC}" errors_doc)
file(MAKE_DIRECTORY "${WORK_DIR}")
set(flags -std=c++20 -Wall -Wextra -Wpedantic -Werror "-I${INCLUDE_DIR}" -fsyntax-only)
set(problems "")  # a string, not a list: compiler output holds ';'

foreach(snippet IN LISTS snippets)
  file(RELATIVE_PATH name "${TESTS_DIR}" "${snippet}")  # <module>/compile_fail/<name>.cpp
  string(REPLACE "/" "_" log "${name}")
  # Read as one string, not with file(STRINGS): sentences hold ';', CMake's list separator.
  file(READ "${snippet}" source)
  string(REGEX MATCHALL "\n// expect: " markers "\n${source}")
  list(LENGTH markers count)
  if(NOT count EQUAL 1)
    string(APPEND problems "${name}: needs exactly one '// expect: <text>' line, has ${count}\n")
    continue()
  endif()
  string(REGEX MATCH "// expect: ([^\n]*)" unused "${source}")
  set(expect "${CMAKE_MATCH_1}")
  string(FIND "${errors_doc}" "${expect}" in_doc)
  if(in_doc EQUAL -1)
    string(APPEND problems "${name}: '${expect}' is not listed in docs/errors.md\n")
  endif()

  execute_process(COMMAND "${CXX}" ${flags} -DHEADROOM_TWIN "${snippet}"
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(APPEND problems "${name}: the correct twin (-DHEADROOM_TWIN) does not compile:\n${out}${err}\n")
    continue()
  endif()

  execute_process(COMMAND "${CXX}" ${flags} "${snippet}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  set(all "${out}${err}")
  file(WRITE "${WORK_DIR}/${log}.log" "${all}")
  if(rc EQUAL 0)
    string(APPEND problems "${name}: compiled, expected an error containing '${expect}'\n")
    continue()
  endif()
  # The first diagnostic with "error" after the file:line:col prefix (g++ and clang++ alike).
  string(REGEX MATCH "[^\n]*:[0-9]+:[0-9]+: (fatal )?error:[^\n]*" first "${all}")
  string(FIND "${first}" "${expect}" at)
  if(at EQUAL -1)
    string(APPEND problems "${name}: the first error does not contain '${expect}' (full output in ${WORK_DIR}/${log}.log):\n${first}\n")
  else()
    message(STATUS "${name}: ${expect}")
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "compile_fail (${CXX}):\n${problems}")
endif()
