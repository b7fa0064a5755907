# SPDX-License-Identifier: Apache-2.0
"""headroom.pipeline: pipeline-parallel schedules, their validator and memory model.

Schedule generators (gpipe, one_f_one_b, interleaved_1f1b, zb_h1, interleaved_zb, and
forward_only for evaluation steps; zbv and dualpipe_v on the V placement, where rank r holds
virtual stages r and 2p - 1 - r), where the virtual stages live (``Placement``: interleaved, the
V, or a user's table), hand-written schedules (``place_transfers`` adds the sends
and receives), the validator, text timelines, the memory model (each rank's peak for one step
under output retention "all", "reduced" or "none", with outputs freed when sent as Megatron does
or kept until their backward as PyTorch's PipelineStage does, runs of transfers issued one by
one or grouped as one batch (``transfers="grouped"``: NCCL group calls, as Megatron and
PyTorch's batch_isend_irecv issue SEND_F + RECV_B), and sizes per virtual stage or per
micro-batch) and PyTorch pipelining's action text (``0F1``, ``1B0``, ``2I3``, ``1W0``,
``0SEND_F1``...) both ways, the full export with the waits, gradient reductions and FSDP cells
PyTorch's runtime needs; rows without a gradient action import as a forward-only schedule.
Everything runs in C++ (``headroom._core.pipeline``).

    >>> from headroom import pipeline
    >>> s = pipeline.schedule("one_f_one_b", stages=2, microbatches=2)
    >>> pipeline.to_pytorch(s, compute_only=True)
    [['0F0', '0F1', '0B0', '0B1'], ['1F0', '1B0', '1F1', '1B1']]
    >>> pipeline.from_pytorch(pipeline.to_pytorch(s), name=s.name) == s
    True
    >>> m = pipeline.predict_memory(s, pipeline.StageBytes(activations=100, output=10), "all")
    >>> [r.peak for r in m.ranks]
    [210, 140]
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

from ._core.pipeline import predict_memory as _predict_memory
from ._core.pipeline import (
    Action,
    BufferPlan,
    PlannedBuffer,
    RankBuffers,
    plan_buffers,
    MemoryPlan,
    Placement,
    RankMemory,
    Schedule,
    Shape,
    StageBytes,
    find_problem,
    fingerprint,
    make_schedule,
    output_lifetimes,
    place_transfers,
    pytorch,
    schedule_kinds,
    ticks,
    timeline,
    transfer_groupings,
    validate,
)

__all__ = [
    "Action", "MemoryPlan", "Placement", "RankMemory", "Schedule", "Shape", "StageBytes", "schedule",
    "make_schedule", "schedule_kinds", "place_transfers", "find_problem", "validate", "timeline",
    "ticks", "predict_memory", "peaks", "to_pytorch", "from_pytorch", "to_csv", "from_csv",
    "RETENTIONS", "FRAMEWORKS", "output_lifetimes", "transfer_groupings", "fingerprint",
    "BufferPlan", "PlannedBuffer", "RankBuffers", "plan_buffers",
]

RETENTIONS = ("all", "reduced", "none")

#: How a framework's pipeline runtime holds outputs and issues transfers (``predict_memory``'s
#: ``framework``). PyTorch's _PipelineScheduleRuntime: every output kept until its backward
#: (PipelineStage's forward cache), each SEND / RECV cell its own batch.
FRAMEWORKS = {"pytorch": {"outputs": "kept_until_backward", "transfers": "one_by_one"}}


def predict_memory(s: Schedule, stage_bytes: Any, retention: str = "all", outputs: Optional[str] = None,
                   transfers: Optional[str] = None, *, framework: Optional[str] = None) -> MemoryPlan:
    """Each rank's peak for one step (``_core.pipeline.predict_memory``); ``framework`` (one of
    ``FRAMEWORKS``) sets ``outputs`` and ``transfers`` as that runtime behaves, the defaults
    otherwise being "freed_when_sent" and "one_by_one"."""
    preset = {"outputs": "freed_when_sent", "transfers": "one_by_one"}
    if framework is not None:
        if framework not in FRAMEWORKS:
            raise ValueError(f"framework = {framework!r}; expected one of {sorted(FRAMEWORKS)}")
        preset = dict(FRAMEWORKS[framework])
    if outputs is not None:
        preset["outputs"] = outputs
    if transfers is not None:
        preset["transfers"] = transfers
    return _predict_memory(s, stage_bytes, retention, preset["outputs"], preset["transfers"])


def schedule(kind: str, stages: int, microbatches: int, chunks: int = 1, group: int = 0) -> Schedule:
    """The schedule of generator ``kind`` (one of ``schedule_kinds``) for the shape."""
    return make_schedule(kind, stages, microbatches, chunks, group)


def peaks(s: Schedule, stage_bytes: Any, outputs: Optional[str] = None, transfers: Optional[str] = None) -> dict:
    """{retention: [peak bytes of rank r]} for every retention policy (``outputs``: the output
    lifetime, one of ``output_lifetimes``; ``transfers``: one of ``transfer_groupings``)."""
    return {r: [m.peak for m in predict_memory(s, stage_bytes, r, outputs, transfers).ranks] for r in RETENTIONS}


def to_pytorch(s: Schedule, compute_only: bool = False, *, send_waits: bool = True, reduce_grad_waits: bool = True,
               fsdp: bool = False, max_active_stages: int = 3) -> list:
    """One list of _Action strings per rank: the computations only, or (the default) every cell
    ``_PipelineScheduleRuntime._load_csv(path, format="compute_comms")`` runs: the transfers,
    ``WAIT_SEND_F``/``WAIT_SEND_B`` (``send_waits``: runtimes that have the type require one per
    send), ``REDUCE_GRAD`` (+ ``WAIT_REDUCE_GRAD`` with ``reduce_grad_waits``; it scales the
    gradients by 1/m) and, with ``fsdp``, ``UNSHARD``/``RESHARD`` for ``max_active_stages``, where
    PyTorch's own lowering puts them. Raises for a forward-only schedule (PyTorch refuses one)."""
    return pytorch.export_actions(s, compute_only, send_waits=send_waits, reduce_grad_waits=reduce_grad_waits,
                                  fsdp=fsdp, max_active_stages=max_active_stages)


def from_pytorch(rows: Iterable[Sequence[Any]], name: str = "pytorch", shape: Optional[Shape] = None,
                 placement: Optional[Placement] = None) -> Schedule:
    """A validated schedule from rows of PyTorch actions (strings, _Action objects or None).

    Compute-only rows get their transfers placed; rows with transfers are taken as they are.
    Rows with no gradient action (no B, I, W, SEND_B, RECV_B) are a forward-only schedule.
    The shape is inferred (p = rows, v from the highest stage, m from the highest micro-batch)
    unless given; the placement is interleaved when every action fits it, else the V when every
    action fits that, else ``placement`` (a user's map is never guessed from the rows).
    ``(aF;bB)OVERLAP_F_B`` cells (DualPipeV) import as one overlapped action.
    """
    if isinstance(rows, (str, bytes)):
        raise TypeError(f"rows = {rows!r}; expected one list of action strings per rank (from_csv reads text)")
    return pytorch.import_actions([list(r) for r in rows], name, shape, placement)


def to_csv(s: Schedule, compute_only: bool = False, **cells: Any) -> str:
    """``to_pytorch`` as the CSV text PyTorch's ``_dump_csv`` writes (torchtitan's
    pipeline_parallel_schedule_csv); ``cells``: the keywords of ``to_pytorch``."""
    return pytorch.to_csv(s, compute_only, **cells)


def from_csv(text: str, name: str = "pytorch", shape: Optional[Shape] = None,
             placement: Optional[Placement] = None) -> Schedule:
    """``from_pytorch`` on the text of such a CSV file."""
    return pytorch.from_csv(text, name, shape, placement)
