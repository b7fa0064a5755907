#pragma once
// The stats module with its CUDA part: memory-report sources read from the CUDA runtime, and the
// device staging policy for reducers over device buffers. Needs the CUDA toolkit.
#include "headroom/stats.hpp"
#include "headroom/stats/cuda/sources.hpp"
#include "headroom/stats/cuda/staging.hpp"
