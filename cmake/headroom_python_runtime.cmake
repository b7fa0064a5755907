# SPDX-License-Identifier: Apache-2.0
# headroom_python_export_init_only(<target>): an extension module exports its PyInit_<target> and
# nothing else; every other symbol in it (its own code, the std:: template instantiations its
# sources made, and a C++ runtime linked in statically) binds inside the module at link time.
#
# Why: a compiler may link the C++ runtime into a shared object statically. The GPU image's
# CXX=/opt/gcc/bin/g++ does (ldd of a module it built shows no libstdc++). The copy's functions
# were then exported from the module with default visibility (libstdc++ declares namespace std
# visibility("default"), which -fvisibility=hidden does not override), and the dynamic linker
# bound the module's calls to them to the first definition in the process: the system
# libstdc++.so.6 that torch and numpy had loaded. Half of the module's C++ runtime was its own
# copy and half the system's, and the first number written to an ostream crashed (SIGSEGV in
# ostream<<(unsigned long) inside _core: runs J and X in docs/BENCHMARKS.md). Even with a shared
# libstdc++ a module exported ~480 std:: instantiations that another library's could interpose.
# A version script makes them local. ELF linkers only (GNU ld, gold, lld, mold); elsewhere a no-op.
include_guard(GLOBAL)

function(headroom_python_export_init_only target)
  if(NOT (CMAKE_SYSTEM_NAME STREQUAL "Linux" OR CMAKE_SYSTEM_NAME MATCHES "BSD"))
    return()
  endif()
  set(_script "${CMAKE_CURRENT_BINARY_DIR}/${target}.exports.map")
  file(CONFIGURE OUTPUT "${_script}" CONTENT "{\n  global: PyInit_${target};\n  local: *;\n};\n")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${_script}")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${_script}")
endfunction()

# The configure log says when the compiler links libstdc++ statically (the case above).
function(headroom_python_report_runtime)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()
  endif()
  execute_process(COMMAND "${CMAKE_CXX_COMPILER}" -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE _so OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT IS_ABSOLUTE "${_so}" OR NOT EXISTS "${_so}")
    message(STATUS "headroom: ${CMAKE_CXX_COMPILER} has no shared libstdc++ (-print-file-name=libstdc++.so "
                   "gives '${_so}'): the extension modules link it statically, a private copy each "
                   "(cmake/headroom_python_runtime.cmake)")
  endif()
endfunction()
