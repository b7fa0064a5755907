# SPDX-License-Identifier: Apache-2.0
"""A drop-in double-buffer allocator for Megatron-FSDP: one arena, planned offsets, fixed addresses.

:func:`install` puts :class:`PoolAllocator` under the two names Megatron-FSDP builds its double
buffers from (``MaxPoolAllocator``, ``FixedPoolAllocator`` in ``param_and_grad_buffer``), for
buffers built afterwards. :class:`PoolAllocator` keeps Megatron's contract and the torch views;
planning, lease bookkeeping, the trace and the fingerprint are ``headroom.pool.LearningArena``'s
(C++), which also keeps a weight bucket where its first lease of a step was and answers
``can_allocate``. A lease is a bucket from its first ``allocate`` to its ``free`` (Megatron re-fetches a held
bucket once per parameter; those calls return the same memory). The first step is served by the
caching allocator while the arena records it; :func:`end_step` plans, agrees across ranks and
allocates one arena inside Megatron's ``mem_alloc_context``; requests the plan cannot hold are
served by the caching allocator and counted; :func:`replan` re-lays; :func:`report` says what
happened; :func:`predict` estimates before a run. docs/torch.md has the details and the lifetime
analysis. The patching (:func:`install`) and the warnings outside an allocator (a missing
:func:`end_step`, buffers built without ``fsdp_double_buffer=True``) are in ``_megatron_hooks``.
Logger: ``headroom.torch.megatron_fsdp``.
"""
from __future__ import annotations

import contextlib
import operator
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

import torch

import headroom
from headroom import pool as hp

from ._megatron_hooks import install, installed, logger, step_ended, uninstall, warn_once, watch_optimizer_steps
from ._megatron_predict import predict

__all__ = [
    "PoolAllocator", "PLANNERS", "install", "uninstall", "installed", "end_step", "replan", "report",
    "predict", "allocators", "add_lease_listener", "remove_lease_listener",
]

PLANNERS = hp.lifetime_planners  # the C++ LearningArena's
DEFAULT_ALIGNMENT = hp.default_alignment


class _Served:
    """What ``allocate`` returns: Megatron reads ``.data`` (a 1-D tensor of ``size`` elements)."""

    __slots__ = ("data",)

    def __init__(self, data: torch.Tensor):
        self.data = data


# ---------------------------------------------------------------------------------------------
# lease events (headroom.torch.profile draws the arena's leases in memory snapshots)

_lease_listeners: List[Callable[[Dict[str, Any]], None]] = []


def add_lease_listener(fn: Callable[[Dict[str, Any]], None]) -> None:
    """Calls ``fn(event)`` at every arena lease and release of every :class:`PoolAllocator`: one
    ``alloc`` at a bucket's first ``allocate``, one ``free`` at its ``free`` (re-fetches of a held
    bucket are not leases). Keys: ``action``, ``allocator``, ``bucket``, ``unit``, ``addr``,
    ``size`` (bytes), ``arena_addr``, ``arena_bytes``, ``slot`` ("@offset"), ``device``. Requests
    served by the caching allocator are ordinary torch allocations and are not reported."""
    _lease_listeners.append(fn)


def remove_lease_listener(fn: Callable[[Dict[str, Any]], None]) -> None:
    with contextlib.suppress(ValueError):
        _lease_listeners.remove(fn)


_live: "weakref.WeakSet[PoolAllocator]" = weakref.WeakSet()
_serial = [0]


def allocators() -> List["PoolAllocator"]:
    """Every live :class:`PoolAllocator`, in construction order."""
    return sorted(_live, key=lambda a: a._serial)


def end_step() -> None:
    """A step boundary for every live allocator; call it on every rank after ``optimizer.step()``.

    The first call after an allocator served a step plans on what it recorded, compares the
    plan's fingerprint across the data-parallel group and allocates its arena; later calls mark
    the boundary in the trace. Allocators that served nothing yet keep waiting."""
    step_ended()
    for a in allocators():
        a.end_step()


def replan() -> None:
    """Every live allocator re-lays its arena on everything it recorded (requests the first step
    did not show included); call it on every rank at a step boundary. One fingerprint comparison
    per planned allocator."""
    for a in allocators():
        a.replan()


def report() -> List[Dict[str, Any]]:
    """:meth:`PoolAllocator.report` of every live allocator."""
    return [a.report() for a in allocators()]


# ---------------------------------------------------------------------------------------------
# helpers


def _storage_dtype(d):
    """Megatron's planning dtype: the string "float8" is stored as uint8."""
    return torch.uint8 if d == "float8" else d


def _itemsize(d) -> int:
    return _storage_dtype(d).itemsize


def _dtype_name(d) -> str:
    return str(_storage_dtype(d)).replace("torch.", "")


class _DynamicBuckets:
    """Megatron's StorageResizeBasedBucketAllocator: one tensor per bucket, storage resized to 0
    at free and back at the next allocate (parameters keep pointing at the same tensor)."""

    def __init__(self):
        self.buckets: Dict[int, _Served] = {}

    def allocate(self, bucket_id, size, dtype, device) -> _Served:
        bucket = self.buckets.get(bucket_id)
        if bucket is None or bucket.data.dtype != dtype or bucket.data.numel() != size:
            bucket = self.buckets[bucket_id] = _Served(torch.empty(size, dtype=dtype, device=device))
        storage = bucket.data.untyped_storage()
        if storage.nbytes() < size * bucket.data.element_size():
            storage.resize_(size * bucket.data.element_size())
        return bucket

    def free(self, bucket_id) -> None:
        bucket = self.buckets.get(bucket_id)
        if bucket is not None:
            bucket.data.untyped_storage().resize_(0)


def _owned_buffers(group, allocator) -> List[Any]:
    """The group's DataParallelBuffers that draw on `allocator` (Megatron sets
    `temporary_bucket_allocator` on each)."""
    return [v for v in (vars(group).values() if hasattr(group, "__dict__") else ())
            if getattr(v, "temporary_bucket_allocator", None) is allocator and hasattr(v, "bucket_index")]


# ---------------------------------------------------------------------------------------------
# the allocator


class PoolAllocator:
    """Megatron-FSDP's double-buffer allocator contract over one planned arena.

    ``planner``: "max" (default), "by_bytes" or "interval". ``group``: the process group whose
    ranks must agree on the plan (default: the data-parallel groups of the buffers that use this
    allocator, else the default group). ``alignment``: of every offset, in bytes. ``max_events``:
    the cap on recorded trace events (the C++ default when None).
    """

    planner = "max"
    alignment = DEFAULT_ALIGNMENT
    group = None
    max_events: Optional[int] = None

    def __init__(self, name: str, fsdp_param_groups: Sequence[Any], size: int = 2,
                 dtype_fn: Callable[[Any], Any] = operator.attrgetter("dtype"),
                 fallback_to_persistent_buffer: bool = False, *, planner: Optional[str] = None,
                 alignment: Optional[int] = None, group=None, max_events: Optional[int] = None):
        planner = self.planner if planner is None else planner
        if planner not in PLANNERS:
            raise headroom.invalid_argument(
                f"PoolAllocator '{name}': planner {planner!r}; expected one of {', '.join(PLANNERS)}")
        if not isinstance(size, int) or isinstance(size, bool) or not 2 <= size <= 64:
            raise headroom.invalid_argument(f"PoolAllocator '{name}': size (buffers) {size!r}; expected 2..64")
        self.name, self.size, self.dtype_fn, self.planner = name, size, dtype_fn, planner
        self.fsdp_param_groups = list(fsdp_param_groups)
        self.fallback_to_persistent_buffer = fallback_to_persistent_buffer
        self.alignment = self.alignment if alignment is None else alignment
        self.group = group if group is not None else type(self).group
        max_events = self.max_events if max_events is None else max_events
        self._arena = hp.LearningArena(planner, alignment=self.alignment,
                                       **({} if max_events is None else {"max_events": max_events}))
        self._dtype: Dict[int, Any] = {}
        units: Dict[int, List[int]] = {}
        for b, pg in enumerate(self.fsdp_param_groups):
            if pg.fsdp_unit_id is None:
                continue
            d = self._dtype[b] = _storage_dtype(dtype_fn(pg))
            units.setdefault(pg.fsdp_unit_id, []).append(b)
            self._arena.declare(b, unit=pg.fsdp_unit_id, group=0, dtype=_dtype_name(d),
                                nbytes=sum(p.numel() for p in pg.params) * _itemsize(d))
        if not units:
            raise headroom.invalid_argument(
                f"PoolAllocator '{name}': none of the {len(self.fsdp_param_groups)} parameter groups belongs "
                "to an FSDP unit (every fsdp_unit_id is None); expected at least one unit to double-buffer")
        self.fsdp_unit_buckets = units
        self.fsdp_double_buffer_units = list(units)
        self.arena: Optional[torch.Tensor] = None
        self._held: Dict[int, _Served] = {}  # bucket -> what allocate returned, while leased
        self._offset: Dict[int, Optional[int]] = {}  # bucket -> arena offset (None: caching allocator)
        self._unrecorded: set = set()  # held buckets Megatron allocated without strict assignment
        self._weights: Optional[bool] = None  # see _holds_weights
        self._views: Dict[Any, _Served] = {}
        self._dynamic = _DynamicBuckets()
        self._persistent: Dict[Any, _Served] = {}
        self._device, self._ctx = None, None
        self._leases = 0
        self._laid: Optional[str] = None  # the fingerprint of the plan the arena holds
        _serial[0] += 1
        self._serial = _serial[0]
        _live.add(self)
        watch_optimizer_steps()

    # -- what the C++ arena knows ---------------------------------------------------------------

    @property
    def plan(self):
        """The C++ plan (``headroom.pool.LifetimePlan``), None while the first step is learned."""
        return self._arena.plan

    @property
    def trace(self):
        """The recorded lease trace (``headroom.pool.LeaseTrace``; ``.to_text()`` writes it)."""
        return self._arena.trace

    def stats(self) -> Dict[str, Any]:
        return self._arena.stats()

    def report(self) -> Dict[str, Any]:
        """``name``, ``planner``, ``planned``, ``arena_bytes`` (allocated), ``bound`` (max load of
        the recorded leases), ``winner`` and ``candidates`` (bytes of each layout compared),
        ``megatron_max_bytes`` (what Megatron's MaxPool holds on the same trace), ``fallbacks`` by
        reason, ``acquires`` (leases) and ``stats`` (the C++ arena's)."""
        plan, stats = self.plan, self._arena.stats()
        return {
            "name": self.name, "planner": self.planner, "planned": plan is not None,
            "arena_bytes": 0 if self.arena is None else self.arena.numel(),
            "bound": plan.bound if plan is not None else None,
            "winner": plan.winner if plan is not None else None,
            "candidates": dict(plan.candidates) if plan is not None else {},
            "megatron_max_bytes": stats["megatron_max_bytes"] if plan is not None else None,
            "fallbacks": dict(stats["fallbacks"]), "acquires": self._leases, "stats": stats,
        }

    # -- checks ---------------------------------------------------------------------------------

    def _check_bucket(self, bucket_id) -> Any:
        if not isinstance(bucket_id, int) or isinstance(bucket_id, bool) or not (
                0 <= bucket_id < len(self.fsdp_param_groups)):
            raise headroom.invalid_argument(
                f"PoolAllocator '{self.name}': bucket id {bucket_id!r} was never planned; expected 0.."
                f"{len(self.fsdp_param_groups) - 1} (one per parameter group)")
        return self.fsdp_param_groups[bucket_id].fsdp_unit_id

    def _agreement_groups(self) -> List[Any]:
        if self.group is not None:
            return [self.group]
        groups = []
        for pg in self.fsdp_param_groups:
            for buf in _owned_buffers(pg, self):
                g = getattr(buf, "data_parallel_group", None)
                if g is not None and all(g is not h for h in groups):
                    groups.append(g)
        return groups or [None]

    def _holds_weights(self) -> bool:
        """Whether Megatron's weight buffers draw on this allocator (their buckets back parameters
        that autograd keeps views of); True for an allocator no buffer names (standalone use)."""
        if self._weights is None:
            names = [n for pg in self.fsdp_param_groups for n, v in (vars(pg).items() if hasattr(pg, "__dict__") else ())
                     if getattr(v, "temporary_bucket_allocator", None) is self]
            self._weights = not names or any("weight" in n or "wbuf" in n or "wtbuf" in n for n in names)
        return self._weights

    def _check_agreement(self) -> None:
        """Every rank of each agreement group must have the same plan: one all_gather_object per
        group, before the arena exists (so before any collective on it)."""
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return
        mine = (self.plan.fingerprint, self.plan.arena_bytes)  # the fingerprint covers the planner
        for g in self._agreement_groups():
            n = dist.get_world_size(g)
            if n == 1:
                continue
            everyone: List[Any] = [None] * n
            dist.all_gather_object(everyone, mine, group=g)
            if any(x != everyone[0] for x in everyone):
                rows = "; ".join(f"rank {i if g is None else dist.get_global_rank(g, i)}: fingerprint {x[0]}, "
                                 f"arena {x[1]} B" for i, x in enumerate(everyone))
                raise headroom.collective_mismatch(
                    f"PoolAllocator '{self.name}': ranks of one data-parallel group planned different arenas "
                    f"({rows}); every rank must build the same parameter groups and run the same steps")

    # -- the contract ---------------------------------------------------------------------------

    def allocate(self, bucket_id: int, size: int, dtype: torch.dtype, device: torch.device,
                 mem_alloc_context: Optional[Callable] = None, strict_assignments: bool = True) -> _Served:
        unit = self._check_bucket(bucket_id)
        if unit is None:
            return self._allocate_non_unit(bucket_id, size, dtype, device, mem_alloc_context)
        if dtype != self._dtype[bucket_id]:
            raise headroom.invalid_argument(
                f"PoolAllocator '{self.name}': bucket {bucket_id} of unit {unit} requested as {dtype}; "
                f"the plan has it as {self._dtype[bucket_id]} (dtype_fn of its parameter group)")
        nbytes = size * _itemsize(dtype)
        held = self._held.get(bucket_id)
        if held is not None:  # a re-fetch of a held bucket: the same memory, not a new lease
            if held.data.numel() == size:
                return held
            offset = self._offset[bucket_id]
            if nbytes > held.data.numel() * held.data.element_size():
                raise headroom.capacity_error(
                    f"PoolAllocator '{self.name}': bucket {bucket_id} of unit {unit} re-fetched at {nbytes} B while "
                    f"it holds {held.data.numel() * held.data.element_size()} B; free it first")
            return self._view(offset, size, dtype) if offset is not None else _Served(held.data[:size])
        self._device, self._ctx = device, mem_alloc_context
        if not strict_assignments and self.plan is None:
            # Megatron's buffer initialisation (param_and_grad_buffer.py:2849/2871): MaxPool does not
            # pin these and they never recur; served by the caching allocator, not a lease of the trace
            self._held[bucket_id] = self._dynamic.allocate(bucket_id, size, dtype, device)
            self._offset[bucket_id] = None
            self._unrecorded.add(bucket_id)
            return self._held[bucket_id]
        # Autograd keeps views of a weight bucket's first lease in a step (the forward's weights for the
        # backward): every lease of the step at the same memory (C++ keep_place; an error otherwise)
        offset = self._arena.acquire(bucket_id, nbytes, keep_place=self._holds_weights())
        self._leases += 1
        if offset is None or self.arena is None:
            if self.arena is not None:
                warn_once(f"{self._serial}/{bucket_id}", "[headroom][%s] bucket %d of unit %s (%d B): the plan cannot "
                          "hold it now (off the recorded trace); served by the caching allocator, counted in "
                          "report()['fallbacks']; replan() at a step boundary takes it in", self.name, bucket_id,
                          unit, nbytes)
            served = self._dynamic.allocate(bucket_id, size, dtype, device)
            self._offset[bucket_id] = None
        else:
            served = self._view(offset, size, dtype)
            self._offset[bucket_id] = offset
            if _lease_listeners:
                self._emit("alloc", bucket_id, served, offset)
        self._held[bucket_id] = served
        return served

    def free(self, bucket_id: int) -> None:
        unit = self._check_bucket(bucket_id)
        if unit is None:
            if not self.fallback_to_persistent_buffer:
                self._dynamic.free(bucket_id)
            return
        served = self._held.pop(bucket_id, None)
        if served is None:
            return  # not held: Megatron frees idempotently (GradReducePipeline.reset frees every bucket)
        if bucket_id in self._unrecorded:
            self._unrecorded.discard(bucket_id)
        else:
            self._arena.release(bucket_id)
        offset = self._offset.pop(bucket_id)
        if offset is None:
            self._dynamic.free(bucket_id)
        elif _lease_listeners:
            self._emit("free", bucket_id, served, offset)

    def can_allocate(self, bucket_ids: Iterable[int], releasable_bucket_ids: Optional[Iterable[int]] = None) -> bool:
        """Whether every bucket of `bucket_ids`, allocated now in order, would find room in the arena
        where ``allocate`` would put it, counting the leases of `releasable_bucket_ids` as released
        (Megatron PR #6316's capacity question; C++ ``LearningArena.can_acquire``). Held buckets
        count once; non-unit buckets and the learning step always fit (the caching allocator serves
        them)."""
        wanted, releasable = ([b for b in dict.fromkeys(ids or ()) if self._check_bucket(b) is not None]
                              for ids in (bucket_ids, releasable_bucket_ids))
        return self._arena.can_acquire(wanted, releasable)

    def end_step(self) -> bool:
        """A step boundary: the first one after this allocator served a step plans and allocates
        the arena. True when the arena was (re)laid. Nothing may be held here."""
        if not self._leases:
            return False  # never used (the FP8 transpose allocator of a BF16 model): nothing to plan
        self._check_nothing_held("end_step")
        self._arena.end_step()
        return self._lay("end_step", agree=self.arena is None)

    def replan(self) -> bool:
        """Re-lays the arena on every recorded step; at a step boundary, on every rank (one
        fingerprint comparison, always). True when the layout changed."""
        if self.plan is None:
            return False
        self._check_nothing_held("replan")
        self._arena.replan()
        return self._lay("replan", agree=True)

    def _check_nothing_held(self, what: str) -> None:
        if self._held:
            raise headroom.invalid_argument(
                f"PoolAllocator '{self.name}': {what}() with buckets {sorted(self._held)} still held; call it at a "
                "step boundary (after optimizer.step()), when Megatron has freed every bucket")

    def _lay(self, what: str, agree: bool) -> bool:
        """(Re)allocates the arena when the plan changed, after the ranks agreed on it."""
        plan = self.plan
        if plan is None:
            return False
        if agree or plan.fingerprint != self._laid:
            self._check_agreement()
        if plan.fingerprint == self._laid:
            return False
        self._views.clear()
        self.arena = None  # the old arena back to the caching allocator first (nothing is held)
        with self._ctx() if self._ctx is not None else contextlib.nullcontext():
            self.arena = torch.empty(plan.arena_bytes, dtype=torch.uint8, device=self._device)
        self._laid = plan.fingerprint
        logger.info("[headroom][%s] %s: arena %d B at %#x, planner %s (winner %s), bound %d B", self.name, what,
                    plan.arena_bytes, self.arena.data_ptr(), self.planner, plan.winner, plan.bound)
        return True

    # -- views and events -----------------------------------------------------------------------

    def _view(self, offset: int, size: int, dtype) -> _Served:
        key = (offset, size, dtype)
        view = self._views.get(key)
        if view is None:
            nbytes = size * _itemsize(dtype)
            if offset + nbytes > self.arena.numel():
                raise headroom.capacity_error(
                    f"PoolAllocator '{self.name}': {nbytes} B at offset {offset} leave the {self.arena.numel()} B arena")
            view = self._views[key] = _Served(self.arena[offset:offset + nbytes].view(dtype))
        return view

    def _lease(self, bucket_id: int, served: _Served, offset: int) -> Dict[str, Any]:
        return {"allocator": self.name, "bucket": bucket_id, "unit": self.fsdp_param_groups[bucket_id].fsdp_unit_id,
                "addr": served.data.data_ptr(), "size": served.data.nbytes, "slot": f"@{offset}"}

    def _emit(self, action: str, bucket_id: int, served: _Served, offset: int) -> None:
        event = {"action": action, **self._lease(bucket_id, served, offset), "arena_addr": self.arena.data_ptr(),
                 "arena_bytes": self.arena.numel(), "device": self.arena.device}
        for fn in list(_lease_listeners):
            fn(event)

    def leases(self) -> List[Dict[str, Any]]:
        """The arena leases held now: allocator, bucket, unit, addr, size (bytes), slot."""
        return [self._lease(b, s, self._offset[b]) for b, s in self._held.items() if self._offset.get(b) is not None]

    # -- non-unit buckets: as Megatron ----------------------------------------------------------

    def _allocate_non_unit(self, bucket_id, size, dtype, device, mem_alloc_context) -> _Served:
        if not self.fallback_to_persistent_buffer:
            return self._dynamic.allocate(bucket_id, size, dtype, device)
        key = (bucket_id, size, dtype)
        if key not in self._persistent:
            with mem_alloc_context() if mem_alloc_context is not None else contextlib.nullcontext():
                self._persistent[key] = _Served(torch.empty(size, dtype=dtype, device=device))
        return self._persistent[key]
