# SPDX-License-Identifier: Apache-2.0
# headroom_cuda_std20(<target> [BUILD_INTERFACE])
# Makes CUDA sources that link <target> compile as C++20. CMake learned nvcc's C++20 flag only
# in 3.26 (3.25.1 fails on cuda_std_20 / CUDA_STANDARD 20), so older CMake gets -std=c++20
# directly. The decision belongs to the CMake that compiles the consumer, so the installed
# config calls this after importing headroom::cuda; the build tree wraps it in BUILD_INTERFACE
# so that the exported target does not carry the producer's choice.
function(headroom_cuda_std20 target)
  if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.26)
    set(prop INTERFACE_COMPILE_FEATURES)
    set(value cuda_std_20)
  else()
    set(prop INTERFACE_COMPILE_OPTIONS)
    set(value "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>")
  endif()
  if(ARGV1 STREQUAL "BUILD_INTERFACE")
    set(value "$<BUILD_INTERFACE:${value}>")
  endif()
  set_property(TARGET ${target} APPEND PROPERTY ${prop} "${value}")
endfunction()
