# SPDX-License-Identifier: Apache-2.0
# ctest consumer_subdirectory / consumer_fetchcontent: builds and runs the parent project of
# tests/consumer/<MODE>/ outside the tree, with headroom taken from this checkout.
#
#   cmake -DMODE=subdirectory|fetchcontent -DHEADROOM_SOURCE=<checkout> -DWORK=<scratch dir>
#         -DGENERATOR=<generator> [-DMAKE_PROGRAM=<path>] [-DCXX=<compiler>] -P run_subproject.cmake
#
# The parent's files are copied as a user would have them: subdirectory/ gets third_party/headroom
# (a link to the checkout); fetchcontent/ gets FETCHCONTENT_SOURCE_DIR_HEADROOM, FetchContent's
# override for a local copy, so no download happens.
foreach(v MODE HEADROOM_SOURCE WORK GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_subproject.cmake: -D${v}=... is required")
  endif()
endforeach()
set(here "${CMAKE_CURRENT_LIST_DIR}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/src/${MODE}")
file(COPY_FILE "${here}/${MODE}/CMakeLists.txt" "${WORK}/src/${MODE}/CMakeLists.txt")
file(COPY_FILE "${here}/check_subproject.cmake" "${WORK}/src/check_subproject.cmake")
file(COPY_FILE "${here}/subproject_app.cpp" "${WORK}/src/${MODE}/app.cpp")

set(args -S "${WORK}/src/${MODE}" -B "${WORK}/build" -G "${GENERATOR}")
if(MAKE_PROGRAM)
  list(APPEND args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CXX)
  list(APPEND args "-DCMAKE_CXX_COMPILER=${CXX}")
endif()
if(MODE STREQUAL "subdirectory")
  file(MAKE_DIRECTORY "${WORK}/src/${MODE}/third_party")
  file(CREATE_LINK "${HEADROOM_SOURCE}" "${WORK}/src/${MODE}/third_party/headroom" SYMBOLIC)
elseif(MODE STREQUAL "fetchcontent")
  list(APPEND args "-DFETCHCONTENT_SOURCE_DIR_HEADROOM=${HEADROOM_SOURCE}")
else()
  message(FATAL_ERROR "run_subproject.cmake: MODE '${MODE}', expected subdirectory or fetchcontent")
endif()

foreach(step configure build run)
  if(step STREQUAL "configure")
    set(cmd "${CMAKE_COMMAND}" ${args})
  elseif(step STREQUAL "build")
    set(cmd "${CMAKE_COMMAND}" --build "${WORK}/build")
  else()
    set(cmd "${WORK}/build/app")
  endif()
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer_${MODE}: ${step} failed (${rc})")
  endif()
endforeach()
