# SPDX-License-Identifier: Apache-2.0
# Which substrates a public header needs, from its path under include/ (the layout rule of
# docs/CONTRIBUTING.md): cuda/, nccl/, mpi/, <module>/cuda/, <module>/cuda.hpp, <module>/mpi.hpp
# and .cuh files are substrate headers; everything else is CUDA-free. Shared by CMakeLists.txt
# (configure time) and check_umbrella.cmake (test time), so both sides agree on the rule.
include_guard(GLOBAL)

# Path pattern => what a header matching it needs (all matching rules add up).
set(HEADROOM_HEADER_RULES
  "(^|/)cuda(/|[.]hpp$|[.]cuh$) => cuda"
  "nccl => cuda nccl"
  "/mpi(/|[.]hpp$) => mpi"
  "[.]cuh$ => cuda nvcc")

# headroom_header_needs(<header> <out-var>): <out-var> = list of cuda, nccl, mpi, nvcc (empty for a
# CUDA-free header). <header> is relative to include/, e.g. headroom/pool/cuda/nccl.hpp.
function(headroom_header_needs header out)
  set(needs "")
  foreach(rule IN LISTS HEADROOM_HEADER_RULES)
    string(REPLACE " => " ";" rule "${rule}")
    list(GET rule 0 pattern)
    list(GET rule 1 what)
    if(header MATCHES "${pattern}")
      separate_arguments(what)
      list(APPEND needs ${what})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES needs)
  set(${out} "${needs}" PARENT_SCOPE)
endfunction()

# headroom_public_headers(<include-dir> <out-var>): every header under <include-dir>/headroom,
# relative to <include-dir>, sorted. In a project the glob re-runs at build time (CONFIGURE_DEPENDS),
# so a new header is picked up without reconfiguring by hand.
function(headroom_public_headers include_dir out)
  set(depends "")
  if(NOT CMAKE_SCRIPT_MODE_FILE)
    set(depends CONFIGURE_DEPENDS)
  endif()
  file(GLOB_RECURSE headers ${depends} RELATIVE "${include_dir}"
       "${include_dir}/headroom/*.hpp" "${include_dir}/headroom/*.cuh")
  list(SORT headers)
  set(${out} "${headers}" PARENT_SCOPE)
endfunction()
