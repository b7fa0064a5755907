# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.megatron_fsdp.predict (defined here, exported there): the lease trace
Megatron-FSDP's schedule makes of its two double-buffer allocators, from a model on the meta
device, planned by the C++ plan_lifetimes."""
from __future__ import annotations

import operator
from typing import Any, Dict, List, Sequence

import torch

import headroom
from headroom import pool as hp


def predict(model: torch.nn.Module, unit_classes: Sequence[type], *, grad_comm_dtype: Any = torch.bfloat16,
            dp: int = 1, micro_batches: int = 1, alignment: int = hp.default_alignment) -> Dict[str, Dict[str, Any]]:
    """Each planner's arena and the bound for a Megatron-FSDP run of ``model`` (on the meta
    device is enough: no GPU, no memory), before launching it. Needs megatron_fsdp; what it
    assumes: docs/torch.md, "Predict before running".

    Megatron-FSDP's own code makes the parameter groups (``_get_parameter_groups`` with
    ``fsdp_unit_modules=unit_classes``, ``optim_grads_params``) and their padded request sizes
    at ``dp`` data-parallel ranks (``build_data_parallel_buffer_index``); the weights are
    requested in the model's parameter dtypes, the gradients in ``grad_comm_dtype`` (None: the
    groups' gradient dtype). One step of ``micro_batches`` is recorded as the lease trace
    ``ParamAndGradBuffer`` makes with overlapped communication by the C++
    ``headroom.pool.models.record_fsdp_step`` (pool/fsdp_trace.hpp: units in module order forward
    and reverse backward, parameters one unit ahead, gradient buckets two units deep) and
    planned by ``headroom.pool.plan_lifetimes`` (C++). Returns, per
    allocator (``fsdp_params``, ``fsdp_grads``) and for their ``total``: ``bound`` (max load),
    the arena of each planner (``max``, ``by_bytes``, ``interval``), the ``winner`` and
    ``megatron_planned``, the bytes Megatron's MaxPoolAllocator plans (``size`` copies of its
    ``max_dtype_bucket_sizes``). A real run records its own trace (``PoolAllocator.trace``);
    where its order differs from this model the arenas differ."""
    from .megatron_fsdp import _dtype_name, _itemsize, _storage_dtype  # the allocator's dtype rules

    try:
        import megatron_fsdp.param_and_grad_buffer as pgb
        from megatron_fsdp.distributed_data_parallel_config import DistributedDataParallelConfig
    except ImportError as e:
        raise headroom.invalid_argument(
            "headroom.torch.megatron_fsdp.predict: megatron_fsdp is not importable (pip install megatron-fsdp)") from e
    if not isinstance(dp, int) or dp < 1:
        raise headroom.invalid_argument(f"headroom.torch.megatron_fsdp.predict: dp {dp!r}; expected an int >= 1")
    if not isinstance(micro_batches, int) or micro_batches < 1:
        raise headroom.invalid_argument(
            f"headroom.torch.megatron_fsdp.predict: micro_batches {micro_batches!r}; expected an int >= 1")
    policy = pgb.BucketingPolicy(fsdp_unit_modules=list(unit_classes), data_parallel_sharding_strategy="optim_grads_params")
    groups = pgb._get_parameter_groups(model, policy, {})[0]
    cfg = DistributedDataParallelConfig(data_parallel_sharding_strategy="optim_grads_params")
    units: Dict[int, List[int]] = {}
    for b, pg in enumerate(groups):
        if pg.fsdp_unit_id is not None:
            units.setdefault(pg.fsdp_unit_id, []).append(b)
    if not units:
        raise headroom.invalid_argument(
            f"headroom.torch.megatron_fsdp.predict: no module of {model.__class__.__name__} is an instance of "
            f"{[c.__name__ for c in unit_classes]}; expected the FSDP unit classes")
    order = [units[u] for u in sorted(units)]
    out: Dict[str, Dict[str, Any]] = {}
    for name, what, dtype_fn in (("fsdp_params", "params", operator.attrgetter("dtype")),
                                 ("fsdp_grads", "grads", (lambda pg: grad_comm_dtype) if grad_comm_dtype is not None
                                  else operator.attrgetter("grad_dtype"))):
        trace, requests = hp.LeaseTrace(), []
        for bs in order:
            requests.append([])
            for b in bs:
                pg, d = groups[b], _storage_dtype(dtype_fn(groups[b]))
                padded = pgb.build_data_parallel_buffer_index(
                    [p.shape for p in pg.params], 0, dp, dp > 1, cfg, b, getattr(pg, "chunk_size_factor", 1))[1].size
                requests[-1].append((b, padded * _itemsize(d)))
                trace.declare(b, unit=pg.fsdp_unit_id, group=0, dtype=_dtype_name(d),
                              nbytes=sum(p.numel() for p in pg.params) * _itemsize(d))
        # requests are Megatron's padded sizes already: request_multiple 1
        hp.models.record_fsdp_step(trace, requests, what, micro_batches=micro_batches, request_multiple=1)
        plan = hp.plan_lifetimes(trace, alignment=alignment, follow_moves=True)  # as the LearningArena
        theirs = pgb.MaxPoolAllocator(name, groups, size=2, dtype_fn=dtype_fn)
        out[name] = {"bound": plan.bound, "max": plan.candidates["max"], "by_bytes": plan.candidates["by_bytes"],
                     "interval": plan.arena_bytes, "winner": plan.winner,
                     "megatron_planned": 2 * sum(n * _itemsize(d) for d, sizes in theirs.max_dtype_bucket_sizes.items()
                                                 for n in sizes)}
    out["total"] = {k: sum(out[a][k] for a in ("fsdp_params", "fsdp_grads"))
                    for k in ("bound", "max", "by_bytes", "interval", "megatron_planned")}
    return out
