"""Run headroom's pipeline schedules in ``torch.distributed.pipelining``, and predict what a torch
pipeline run holds. Torch glue only: the schedules, their export (waits, gradient reductions,
FSDP cells), the validator and the memory model are headroom's C++ (``headroom.pipeline``).

    from headroom import pipeline
    from headroom.torch import pipelining
    s = pipeline.schedule("zb_h1", stages=2, microbatches=8)
    stage = PipelineStage(module, stage_index=rank, num_stages=2, device=dev)  # this rank's stages
    runtime = pipelining.build_schedule(s, [stage], loss_fn=loss_fn)          # a torch schedule
    runtime.step(x, target=y, losses=losses)

    sizes = pipelining.stage_bytes([stage0_module, stage1_module], example_input)  # on the meta device
    plan = pipelining.predict_memory(s, sizes, return_outputs=False)

``build_schedule`` loads the full export (``pipeline.to_csv``) with
``_PipelineScheduleRuntime._load_csv(format="compute_comms")``, so torch runs the order, the
transfers and the waits headroom made; it writes the cells this torch's runtime has (older
runtimes have no ``WAIT_SEND_*`` / ``WAIT_REDUCE_GRAD``) and the FSDP cells when a stage's module
is FSDP-wrapped (``fully_shard``).
"""
from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Optional, Sequence

import torch
from torch.distributed.pipelining import schedules as _schedules

from .. import pipeline

__all__ = ["runtime_cells", "export", "build_schedule", "predict_memory", "stage_bytes"]


def runtime_cells() -> dict:
    """The keywords of ``pipeline.to_pytorch`` this torch's runtime needs: whether its action
    types include ``WAIT_SEND_F`` (then every send needs its wait) and ``WAIT_REDUCE_GRAD``."""
    types = {t.value for t in _schedules._ComputationType}
    return {"send_waits": "WAIT_SEND_F" in types, "reduce_grad_waits": "WAIT_REDUCE_GRAD" in types}


def _uses_fsdp(stages: Sequence[Any]) -> bool:
    from torch.distributed.fsdp import FSDPModule
    return any(isinstance(st.submod, FSDPModule) for st in stages)


def export(s: pipeline.Schedule, *, fsdp: bool = False, compute_only: bool = False,
           max_active_stages: int = 3) -> str:
    """The CSV of ``s`` for this torch's ``_PipelineScheduleRuntime``."""
    return pipeline.to_csv(s, compute_only, fsdp=fsdp, max_active_stages=max_active_stages, **runtime_cells())


def build_schedule(s: pipeline.Schedule, stages: Sequence[Any], *, loss_fn: Optional[Callable] = None,
                   compute_only: bool = False, fsdp: Optional[bool] = None, max_active_stages: int = 3,
                   **kwargs: Any) -> "_schedules._PipelineScheduleRuntime":
    """A torch ``_PipelineScheduleRuntime`` running ``s`` with this rank's ``stages``
    (``PipelineStage`` objects, one per virtual stage the schedule's placement gives this rank).
    ``compute_only``: load the computations and let torch's lowering add the rest (its transfers,
    not headroom's). ``fsdp``: write UNSHARD / RESHARD (default: when a stage's module is
    FSDP-wrapped). ``kwargs`` go to the runtime (``scale_grads``, ``output_merge_spec``...)."""
    stages = list(stages)
    if not stages:
        raise ValueError("stages = []; expected this rank's PipelineStage objects, one per virtual stage it holds")
    rank, p = stages[0].group_rank, stages[0].group_size
    shape = s.shape
    if p != shape.stages or stages[0].num_stages != shape.virtual_stages():
        raise ValueError(f"stages run a pipeline of {p} ranks and {stages[0].num_stages} stages; schedule "
                         f"'{s.name}' has p = {shape.stages} and p·v = {shape.virtual_stages()}")
    want = sorted(s.placement.virtual_stage(rank, c) for c in range(shape.chunks))
    got = sorted(st.stage_index for st in stages)
    if got != want:
        raise ValueError(f"rank {rank} passed stages {got}; schedule '{s.name}' places stages {want} on it "
                         f"(placement {s.placement!r})")
    if fsdp is None:
        fsdp = _uses_fsdp(stages)
    text = export(s, fsdp=fsdp, compute_only=compute_only, max_active_stages=max_active_stages)
    if compute_only and max_active_stages != 3:  # torch's own lowering places the FSDP cells then
        kwargs["max_active_stages"] = max_active_stages
    runtime = _schedules._PipelineScheduleRuntime(stages, shape.microbatches, loss_fn=loss_fn, **kwargs)
    fd, path = tempfile.mkstemp(suffix=".csv", prefix=f"headroom-{s.name}-")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        runtime._load_csv(path, format="compute_only" if compute_only else "compute_comms")
    finally:
        os.unlink(path)
    return runtime


def predict_memory(s: pipeline.Schedule, sizes: Any, *, return_outputs: bool = True) -> pipeline.MemoryPlan:
    """Each rank's predicted peak for one torch step of ``s``: torch's output lifetime (a stage
    keeps each output until its backward), the last stage's outputs kept for ``step()``'s result
    when ``return_outputs`` (retention "all", else only the losses: "reduced"), received inputs
    kept until their backward; ``sizes`` as ``pipeline.predict_memory`` takes them."""
    return pipeline.predict_memory(s, sizes, "all" if return_outputs else "reduced", framework="pytorch")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def stage_bytes(modules: Sequence[torch.nn.Module], example: Any, *, device: Any = "meta",
                parameters: Optional[Sequence[int]] = None) -> list:
    """One ``pipeline.StageBytes`` per virtual stage, measured from one forward of each stage in
    order (stage s + 1 gets stage s's output) on ``device`` (the meta device: no memory, no
    compute; the modules must be on it, ``module.to("meta")``). ``activations``: the bytes
    autograd saves for the backward, less the parameters and the stage's input, each storage
    counted once; ``output``: the output's bytes; ``parameters``: given, or the parameters' and
    their gradients' bytes. ``example``: stage 0's input (a tensor or a tuple of tensors)."""
    out = []
    x = example
    for i, module in enumerate(modules):
        args = x if isinstance(x, tuple) else (x,)
        args = tuple(a.to(device).detach().requires_grad_(a.is_floating_point() and i > 0)
                     if isinstance(a, torch.Tensor) else a for a in args)
        excluded = {id(p) for p in module.parameters()} | {id(a) for a in args if isinstance(a, torch.Tensor)}
        seen: dict = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            base = t._base if t._base is not None else t
            if id(base) not in excluded and id(t) not in excluded:
                seen[id(base)] = max(seen.get(id(base), 0), _nbytes(base))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = module(*args)
        ys = y if isinstance(y, tuple) else (y,)
        params = sum(2 * _nbytes(p) for p in module.parameters()) if parameters is None else parameters[i]
        out.append(pipeline.StageBytes(activations=sum(seen.values()),
                                       output=sum(_nbytes(t) for t in ys if isinstance(t, torch.Tensor)),
                                       parameters=params))
        x = y
    return out
