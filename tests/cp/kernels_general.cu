// SPDX-License-Identifier: Apache-2.0
// cp kernels against the host ops with the runs kernel off: split and to_sequence_order on the
// general kernel, as copies above HEADROOM_CP_RUNS_MAX_BYTES run (kernel_cases.cuh).
#define HEADROOM_CP_ROW_RUNS 0
#include "kernel_cases.cuh"
