# SPDX-License-Identifier: Apache-2.0
"""headroom.pool: fixed-address pools planned before a byte is allocated.

Workloads (units of buckets), execution orders, Megatron-FSDP's fixed / max planners and the
interval planner, plans as data, validation against an order, fingerprints, the model presets
and a host unit pool (acquire / release / can_acquire without a GPU); lease traces of a real run
planned on their lifetimes (LeaseTrace, plan_lifetimes, LearningArena). Every computation is the
C++ one (``headroom._core.pool``); this module turns Python data into its types and back.

    >>> from headroom import pool
    >>> w = pool.workload("toy", [[("bf16", 1024), ("fp8", 4096)], [("bf16", 512)]])
    >>> p = pool.plan(w, "max", buffers=2)
    >>> p.arena_bytes, p.bucket_offsets(0, 0)
    (12288, [0, 6144])
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

from ._core import invalid_argument
from ._core.pool import (
    Bucket,
    ExecutionOrder,
    HostUnitPool,
    Lease,
    LearningArena,
    LeaseTrace,
    LifetimePlan,
    Padding,
    Plan,
    ResidencyConflict,
    Slot,
    SlotShape,
    Unit,
    Workload,
    default_alignment,
    evaluation_order,
    fingerprint,
    find_conflict,
    lifetime_planners,
    lower_bound,
    make_interval_plan,
    make_plan,
    max_buffers,
    plan_lifetimes,
    max_workload_bytes,
    models,
    planners,
    training_order,
    units_sharing_bytes,
    validate_orders,
    validate_plan,
)

__all__ = [
    "Bucket", "Unit", "Workload", "ExecutionOrder", "Padding", "Plan", "Slot", "SlotShape",
    "ResidencyConflict", "HostUnitPool", "Lease", "bucket", "unit", "workload", "order",
    "training_order", "evaluation_order", "pad_elements", "align_bytes", "plan", "make_plan",
    "make_interval_plan", "lower_bound", "find_conflict", "validate", "validate_orders",
    "units_sharing_bytes", "fingerprint", "as_dict", "model_workload", "models",
    "default_alignment", "max_buffers", "max_workload_bytes",
    "LeaseTrace", "LifetimePlan", "LearningArena", "plan_lifetimes", "planners", "lifetime_planners",
]

BucketLike = Union[Bucket, Sequence[Any], Mapping[str, Any]]


def bucket(dtype: Any, elements: Optional[int] = None, *, bytes: Optional[int] = None,
           label: str = "") -> Bucket:
    """A bucket of ``elements`` elements of ``dtype`` or of ``bytes`` bytes (exactly one).

    ``dtype`` is a name ("bfloat16", "bf16", "fp8", "float32"...), a numpy dtype or a torch
    dtype; fp8 is stored as uint8, one byte per element, as Megatron-FSDP does.
    """
    if (elements is None) == (bytes is None):
        raise invalid_argument(
            f"bucket({dtype!r}, elements={elements!r}, bytes={bytes!r}): expected exactly one of "
            "elements and bytes")
    if elements is not None:
        return Bucket.of_elements(dtype, elements, label)
    return Bucket(dtype, bytes, label)


def _bucket(b: BucketLike, where: str) -> Bucket:
    if isinstance(b, Bucket):
        return b
    if isinstance(b, Mapping):
        extra = set(b) - {"dtype", "elements", "bytes", "label"}
        if "dtype" not in b or extra:
            raise invalid_argument(
                f"{where} = {b!r}; expected a dict with 'dtype' and 'elements' or 'bytes' "
                "(and optionally 'label')")
        return bucket(b["dtype"], b.get("elements"), bytes=b.get("bytes"), label=b.get("label", ""))
    if isinstance(b, (tuple, list)) and len(b) in (2, 3) and not isinstance(b[0], (tuple, list)):
        return bucket(b[0], b[1], label=b[2] if len(b) == 3 else "")
    raise TypeError(f"{where} = {b!r}; expected a Bucket, a (dtype, elements[, label]) tuple or a dict")


def unit(name: str, buckets: Iterable[BucketLike]) -> Unit:
    """A unit from buckets given as Bucket, (dtype, elements[, label]) or dicts."""
    if isinstance(buckets, (str, bytes, Mapping)) or not isinstance(buckets, Iterable):
        raise TypeError(f"unit {name!r}: buckets = {buckets!r}; expected a list of buckets")
    return Unit(name, [_bucket(b, f"unit {name!r} bucket {i}") for i, b in enumerate(buckets)])


def workload(name: Union[str, Mapping[str, Any]], units: Optional[Iterable[Any]] = None,
             non_unit: Iterable[BucketLike] = ()) -> Workload:
    """A workload from Python data.

    ``units`` items are Unit objects, lists of buckets (named ``unit.<i>``) or dicts
    ``{"name": ..., "buckets": [...]}``. A single dict ``{"name", "units", "non_unit"}``
    (as ``as_dict(w)`` gives) works too.
    """
    if isinstance(name, Mapping):
        data = name
        if units is not None or "units" not in data:
            raise invalid_argument(f"workload({data!r}): expected a dict with 'name' and 'units'")
        return workload(data.get("name", ""), data["units"], data.get("non_unit", ()))
    if units is None:
        raise invalid_argument(f"workload {name!r}: no units given; expected a list of units")
    out = []
    for i, u in enumerate(units):
        if isinstance(u, Unit):
            out.append(u)
        elif isinstance(u, Mapping):
            if "buckets" not in u:
                raise invalid_argument(f"workload {name!r} unit {i} = {u!r}; expected a dict with 'buckets'")
            out.append(unit(u.get("name", f"unit.{i}"), u["buckets"]))
        else:
            out.append(unit(f"unit.{i}", u))
    return Workload(name, out, [_bucket(b, f"workload {name!r} non-unit bucket {i}")
                                for i, b in enumerate(non_unit)])


def order(name: str, units: Iterable[int]) -> ExecutionOrder:
    """An execution order: unit indices in acquisition order."""
    return ExecutionOrder(name, list(units) if not isinstance(units, Sequence) else units)


def pad_elements(multiple: int) -> Padding:
    """Pad each bucket's element count to a multiple (Megatron's runtime ``_pad(numel, m)``)."""
    return Padding.elements(multiple)


def align_bytes(alignment: int) -> Padding:
    """Round each bucket up to a multiple of ``alignment`` bytes (a power of two)."""
    return Padding.bytes(alignment)


def plan(w: Workload, planner: str = "max", *, category: str = "by_dtype", buffers: int = 2,
         alignment: int = default_alignment, padding: Optional[Padding] = None,
         orders: Union[None, ExecutionOrder, Sequence[ExecutionOrder]] = None,
         resident: int = 2) -> Plan:
    """Plans a pool for ``w``.

    planner "fixed" / "max": Megatron-FSDP's planners, ``buffers`` copies of every slot,
    slots typed ``category`` "by_dtype" or untyped "by_bytes".
    planner "interval": one byte range per unit such that the ``resident`` units alive together
    in any of ``orders`` (default: the training order) never overlap.
    """
    if not isinstance(w, Workload):
        raise TypeError(f"plan: workload = {w!r}; expected a headroom.pool.Workload (pool.workload(...))")
    if planner == "interval":
        if category != "by_dtype":
            raise invalid_argument(f"plan: category = {category!r} with planner 'interval'; interval plans "
                                   "share bytes across dtypes (by_bytes) by construction, leave category out")
        if buffers != 2:
            raise invalid_argument(f"plan: buffers = {buffers!r} with planner 'interval'; interval plans have "
                                   "one slot per bucket, give resident=N instead")
        return make_interval_plan(w, [training_order(w)] if orders is None else orders, resident,
                                  alignment, padding)
    if orders is not None:
        raise invalid_argument(f"plan: orders given with planner {planner!r}; only 'interval' plans for orders")
    return make_plan(w, planner, category, buffers, alignment, padding)


def validate(p: Plan, o: ExecutionOrder, resident: int = 0) -> None:
    """Raises logic_error naming both units when ``o`` breaks ``p`` (resident 0: the plan's N)."""
    validate_plan(p, o, resident)


def model_workload(model: str, expert_parallel: int = 1, *, fp8_params: bool = False,
                   first_last_layers_bf16: bool = True, grad_dtype: Any = None,
                   non_unit_bucket_elements: int = 40_000_000) -> Workload:
    """One rank's FSDP workload of a model preset (``models.names()``)."""
    return models.make_workload(model, expert_parallel, fp8_params, first_last_layers_bf16,
                                grad_dtype, non_unit_bucket_elements)


def as_dict(x: Union[Plan, Workload, Bucket, Unit, ExecutionOrder]) -> dict:
    """Plain Python data (JSON-ready) of a plan, workload, unit, bucket or order.

    A plan's dict holds every field of the C++ plan, each bucket's offsets (one per buffer
    group; empty when the bucket has no slot) and the fingerprint.
    """
    if isinstance(x, Bucket):
        d = {"dtype": x.dtype, "bytes": x.bytes}
        if x.label:
            d["label"] = x.label
        return d
    if isinstance(x, Unit):
        return {"name": x.name, "buckets": [as_dict(b) for b in x.buckets]}
    if isinstance(x, Workload):
        return {"name": x.name, "units": [as_dict(u) for u in x.units],
                "non_unit": [as_dict(b) for b in x.non_unit]}
    if isinstance(x, ExecutionOrder):
        return {"name": x.name, "units": list(x.units)}
    if isinstance(x, Plan):
        return {
            "workload_name": x.workload_name,
            "planner": x.planner,
            "category_policy": x.category_policy,
            "padding": x.padding,
            "buffers": x.buffers,
            "alignment": x.alignment,
            "resident": x.resident,
            "orders": [as_dict(o) for o in x.orders],
            "representative_unit": x.representative_unit,
            "arena_bytes": x.arena_bytes,
            "shapes": [{"category": s.category, "category_name": s.category_name, "ordinal": s.ordinal,
                        "bytes": s.bytes, "defining_unit": s.defining_unit,
                        "defining_bucket": s.defining_bucket} for s in x.shapes],
            "slots": [{"group": s.group, "shape": s.shape, "offset": s.offset, "bytes": s.bytes}
                      for s in x.slots],
            "units": [{"name": name, "pooled": pooled, "bucket_bytes": list(nbytes),
                       "bucket_shape": list(shapes),
                       "bucket_offsets": [x.bucket_offsets(u, b) for b in range(len(nbytes))]}
                      for u, (name, pooled, nbytes, shapes) in enumerate(
                          zip(x.unit_names, x.pooled, x.bucket_bytes, x.bucket_shape))],
            "non_unit_bytes": list(x.non_unit_bytes),
            "fallback_bytes": x.fallback_bytes(),
            "fingerprint": x.fingerprint,
        }
    raise TypeError(f"as_dict: {x!r}; expected a Plan, Workload, Unit, Bucket or ExecutionOrder")
