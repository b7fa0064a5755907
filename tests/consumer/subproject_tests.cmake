# SPDX-License-Identifier: Apache-2.0
# Included by the top CMakeLists.txt with the tests: headroom as a subproject of a core-only
# parent, through add_subdirectory and through FetchContent (run_subproject.cmake), must find
# nothing but itself and build the parent's program. Label host; about 10 s each.
foreach(mode subdirectory fetchcontent)
  add_test(NAME consumer_${mode}
           COMMAND "${CMAKE_COMMAND}" -DMODE=${mode} "-DHEADROOM_SOURCE=${PROJECT_SOURCE_DIR}"
                   "-DWORK=${PROJECT_BINARY_DIR}/consumer_${mode}" "-DGENERATOR=${CMAKE_GENERATOR}"
                   "-DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}" "-DCXX=${CMAKE_CXX_COMPILER}"
                   -P "${CMAKE_CURRENT_LIST_DIR}/run_subproject.cmake")
  set_tests_properties(consumer_${mode} PROPERTIES LABELS host TIMEOUT ${HEADROOM_TEST_TIMEOUT})
endforeach()
