// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::pipeline: pipeline-parallel schedules (GPipe, 1F1B, interleaved 1F1B, ZB-H1) as
// validated, printable action lists; output retention policies for the last stage; a
// query-first memory model; PyTorch pipelining's action format both ways; an executor over any
// communicator. CUDA-free; the CUDA backend lives in headroom/pipeline/cuda/.
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/buffer_arena.hpp"
#include "headroom/pipeline/buffer_plan.hpp"
#include "headroom/pipeline/capture.hpp"
#include "headroom/pipeline/executor.hpp"
#include "headroom/pipeline/fingerprint.hpp"
#include "headroom/pipeline/memory_model.hpp"
#include "headroom/pipeline/output_lifetime.hpp"
#include "headroom/pipeline/placement.hpp"
#include "headroom/pipeline/pytorch_format.hpp"
#include "headroom/pipeline/retention.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/schedules.hpp"
#include "headroom/pipeline/shape.hpp"
#include "headroom/pipeline/stage.hpp"
#include "headroom/pipeline/stage_bytes.hpp"
#include "headroom/pipeline/timeline.hpp"
#include "headroom/pipeline/transport.hpp"
#include "headroom/pipeline/v_schedules.hpp"
#include "headroom/pipeline/validate.hpp"
