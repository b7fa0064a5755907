// SPDX-License-Identifier: Apache-2.0
// cp kernels against the host ops, as shipped (kernel_cases.cuh).
#include "kernel_cases.cuh"
