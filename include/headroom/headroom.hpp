// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom — every CUDA-free public header: core, the host substrate, and the CUDA-free part of
// each module. Compiles with a plain C++20 compiler; pulls no CUDA, NCCL or MPI header (a test
// checks both). The substrates and the CUDA parts have their own umbrellas:
//   headroom/cuda.hpp, headroom/nccl.hpp, headroom/mpi.hpp,
//   headroom/<module>/cuda.hpp (headroom/cp/cuda.cuh for nvcc-only kernels).
#include "headroom/core.hpp"
#include "headroom/cp.hpp"
#include "headroom/host.hpp"
#include "headroom/lifetime.hpp"
#include "headroom/pipeline.hpp"
#include "headroom/pool.hpp"
#include "headroom/stats.hpp"
#include "headroom/trace.hpp"
#include "headroom/version.hpp"
