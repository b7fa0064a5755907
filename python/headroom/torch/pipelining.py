# SPDX-License-Identifier: Apache-2.0
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
    plan = pipelining.predict_memory(s, sizes, return_outputs=False)   # a MemoryPlan (C++)
    peaks = pipelining.predict_peaks(s, sizes, return_outputs=True)    # with step()'s merged result

``build_schedule`` loads the full export (``pipeline.to_csv``) with
``_PipelineScheduleRuntime._load_csv(format="compute_comms")``, so torch runs the order, the
transfers and the waits headroom made; it writes the cells this torch's runtime has (older
runtimes have no ``WAIT_SEND_*`` / ``WAIT_REDUCE_GRAD``) and the FSDP cells when a stage's module
is FSDP-wrapped (``fully_shard``).
"""
from __future__ import annotations

import os
import tempfile
import weakref
from typing import Any, Callable, Optional, Sequence

import torch
from torch.distributed.pipelining import schedules as _schedules

from .. import pipeline

__all__ = ["runtime_cells", "export", "build_schedule", "predict_memory", "predict_peaks", "stage_bytes"]


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


def predict_memory(s: pipeline.Schedule, sizes: Any, *, return_outputs: bool = True,
                   transfers: Optional[str] = None) -> pipeline.MemoryPlan:
    """Each rank's predicted bytes for one torch step of ``s`` (``pipeline.predict_memory`` with
    ``framework="pytorch"``): a stage keeps each output until its backward, the last stage keeps
    its outputs for ``step()``'s result when ``return_outputs`` (retention "all", else only the
    losses: "reduced"), received inputs are held until their backward. ``sizes`` as
    ``pipeline.predict_memory`` takes them; ``transfers="grouped"`` for torch's single-stage
    schedules (Schedule1F1B posts a forward send and a backward receive as one batch)."""
    return pipeline.predict_memory(s, sizes, "all" if return_outputs else "reduced", None, transfers,
                                   framework="pytorch")


def predict_peaks(s: pipeline.Schedule, sizes: Any, *, return_outputs: bool = True,
                  transfers: Optional[str] = None) -> list:
    """Each rank's predicted peak for one torch step, parameters excluded: ``predict_memory``'s
    peak, and on the rank of the last stage with ``return_outputs`` the moment ``step()``
    concatenates the kept outputs into its result (``_merge_outputs``: one more copy of them)."""
    plan = predict_memory(s, sizes, return_outputs=return_outputs, transfers=transfers)
    peaks = [r.peak for r in plan.ranks]
    if return_outputs:
        last = s.shape.virtual_stages() - 1
        per_mb = sizes if isinstance(sizes, (list, tuple)) and sizes and isinstance(sizes[0], (list, tuple)) else None
        if per_mb is not None:
            merged = sum(row[last].output for row in per_mb)
        else:
            one = sizes if isinstance(sizes, pipeline.StageBytes) else sizes[last]
            merged = one.output * s.shape.microbatches
        r = s.placement.rank_of(last)
        peaks[r] = max(peaks[r], plan.rank(r).held_at_end + merged)
    return peaks


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _release(live: dict, storage: int) -> None:
    live[storage] -= 1


class _Saved:
    """What autograd holds for one saved tensor while the measurement runs: a detached alias (a
    saved output holding itself would make a reference cycle no graph release could break), so
    the graph dropping it says when autograd lets the storage go."""
    __slots__ = ("t", "__weakref__")

    def __init__(self, t: torch.Tensor):
        self.t = t.detach()


def _split_backward(module: torch.nn.Module, args: tuple, ys: list, loss: Any, live: dict, saved: dict) -> tuple:
    """(kept_for_weight, weight_stash) of one stage as torch's split backward holds them: the
    stage's input half (``stage_backward_input``, as ``PipelineStage.backward_one_chunk`` calls it),
    then what it keeps for the weight half: the saved storages its retained graph still holds
    (``live``: storage -> live holders) and the gradients it stashed at the weight nodes
    (``param_groups``), each storage once, less the input, output and output gradient."""
    from torch.distributed.pipelining._backward import stage_backward_input
    if loss is not None:
        roots, grads = (loss,), None
    else:
        roots, grads = tuple(ys), [torch.ones_like(t) for t in ys]
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    _, param_groups = stage_backward_input(roots, grads, inputs, module.parameters())
    for t in ys:  # the stage detaches the last stage's output after the input half
        if not t._is_view():
            t.detach_()
    del roots, loss
    kept = sum(saved[st] for st, n in live.items() if n > 0 and st in saved)
    skip = set(saved) | {_storage(t) for t in ys + inputs + (grads or [])} | {_storage(p) for p in module.parameters()}
    stash: dict = {}
    for group in param_groups:
        for grad_tuple in group.get("grads") or ():
            for g in grad_tuple:
                if isinstance(g, torch.Tensor) and _storage(g) not in skip:
                    stash[_storage(g)] = g.untyped_storage().nbytes()
    return kept, sum(stash.values())


def stage_bytes(modules: Sequence[torch.nn.Module], example: Any, *, loss_fn: Optional[Callable] = None,
                target: Any = None, parameters: Optional[Sequence[int]] = None,
                split_backward: Optional[bool] = None) -> list:
    """One ``pipeline.StageBytes`` per virtual stage from one forward of each stage in order
    (stage s + 1 gets stage s's output), on the device the modules and ``example`` are on: the
    meta device measures without memory or compute (``module.to("meta")``, a meta ``example``).
    ``activations``: the bytes autograd saves for the backward, each storage once, less the
    parameters, the stage's input and its output; on the last stage with ``loss_fn`` and
    ``target``, also what the loss saves. ``output``: the output's bytes. ``parameters``: given
    per stage, or the parameters' bytes and their gradients'. ``example``: stage 0's input (a
    tensor or a tuple). With ``split_backward`` (default: when ``loss_fn`` is given; zero-bubble
    schedules run a backward as I and W), also what torch's
    split backward keeps from I to W, from one run of its input half (``stage_backward_input``):
    ``kept_for_weight``, the activations its retained graph still holds (all of them on stage 0,
    whose input half torch skips), and ``weight_stash``, the gradients it stashes at the weight
    nodes (on the last stage the logits' gradient). The last stage needs ``loss_fn`` and ``target``
    for it. Temporaries (``workspace``) are allocator-level: measure them on a GPU."""
    out = []
    x = example
    for i, module in enumerate(modules):
        args = x if isinstance(x, tuple) else (x,)
        args = tuple(a.detach().requires_grad_(a.is_floating_point() and i > 0) if isinstance(a, torch.Tensor) else a
                     for a in args)
        excluded = {_storage(p) for p in module.parameters()} | {_storage(a) for a in args if isinstance(a, torch.Tensor)}
        saved: dict = {}
        live: dict = {}

        def pack(t: torch.Tensor) -> _Saved:
            st = _storage(t)
            saved[st] = max(saved.get(st, 0), t.untyped_storage().nbytes())
            held = _Saved(t)
            live[st] = live.get(st, 0) + 1
            weakref.finalize(held, _release, live, st)
            return held

        last = i == len(modules) - 1
        loss = None
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda held: held.t):
            y = module(*args)
            if last and loss_fn is not None:
                loss = loss_fn(y, target)
        ys = [t for t in (y if isinstance(y, tuple) else (y,)) if isinstance(t, torch.Tensor)]
        excluded |= {_storage(t) for t in ys}
        for st in excluded:
            saved.pop(st, None)
        params = sum(2 * p.numel() * p.element_size() for p in module.parameters()) if parameters is None else parameters[i]
        activations = sum(saved.values())
        kept = stash = 0
        if split_backward is None:
            split_backward = loss_fn is not None
        if split_backward and any(t.requires_grad for t in ys):
            if i == 0:
                kept = activations  # torch runs stage 0's whole backward at W
            elif last and loss is None:
                raise ValueError("stage_bytes(split_backward=True) without loss_fn: expected loss_fn and target, "
                                 "the last stage's input half starts from the loss")
            else:
                kept, stash = _split_backward(module, args, ys, loss if last else None, live, saved)
        out.append(pipeline.StageBytes(activations=activations, output=sum(t.numel() * t.element_size() for t in ys),
                                       parameters=params, kept_for_weight=kept, weight_stash=stash))
        x = y.detach() if isinstance(y, torch.Tensor) else y
    return out
