// SPDX-License-Identifier: Apache-2.0
// cp kernels against the host ops, as shipped (kernel_cases.cuh).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "kernel_cases.cuh"
