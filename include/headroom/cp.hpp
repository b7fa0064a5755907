#pragma once
// headroom::cp — packed-sequence context-parallel split / gather (CUDA-free part).
#include "headroom/cp/cu_seqlens.hpp"
#include "headroom/cp/gather.hpp"
#include "headroom/cp/layout.hpp"
#include "headroom/cp/loss.hpp"
#include "headroom/cp/matrix.hpp"
#include "headroom/cp/ops.hpp"
#include "headroom/cp/output.hpp"
#include "headroom/cp/padding.hpp"
#include "headroom/cp/partition.hpp"
