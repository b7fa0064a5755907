// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Deprecated: include <headroom/pipeline/mpi.hpp>. This header forwards to it and will be removed
// after 0.1: the pipeline executor's MPI transport belongs to the pipeline module, beside
// pipeline/cuda/, not to the MPI substrate.
#include "headroom/pipeline/mpi.hpp"
