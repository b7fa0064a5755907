// SPDX-License-Identifier: Apache-2.0
// headroom._torch_ops: importing it registers the CP ops of ops.cpp with torch's dispatcher (its
// static initialisers run at load; import torch first, which headroom.torch.cp does). The module
// itself holds nothing.
#include <nanobind/nanobind.h>

NB_MODULE(_torch_ops, m) {
  m.doc() = "headroom's CP split and reorder ops, registered with torch's dispatcher on the LibTorch stable ABI "
            "(torch.ops.headroom.cp_split, cp_split_adjoint, cp_to_sequence_order, cp_to_rank_order)";
}
