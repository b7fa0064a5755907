"""Memory statistics reduced across a process group: exact, typed, and an error rather than a hang.

``max_memory_report(report, group)`` takes a dict of numbers (default: every key of
``torch.cuda.memory_stats()``) and returns the per-key MAX over the ranks of ``group``, in one
collective. ``gather(report, group)`` returns, per key, every rank's value with max, min, mean and
the rank that holds the max. ``reduce_max_memory_across_pp_group(memory_report, pp_group)`` is a
drop-in for Megatron-Bridge's function of that name (same arguments, same result), exact where it
is not.

* Exact: values travel as int64 (floats as their order-preserving 64-bit pattern), so counters
  above 2^53 (byte counts of a long run) keep every digit; ints come back as int, floats as
  float, bools as bool.
* Agreement: the first call on a group compares the ranks' key sets (one ``all_gather_object``)
  and remembers them; every later call is one ``all_reduce`` whose header carries the schema's
  fingerprint, so a rank whose keys changed makes every rank raise
  :class:`headroom.collective_mismatch` naming the keys, with the group still usable (nothing is
  left half-sent). Differing keys are never a hang and never silently mixed.
* No-op (a copy of the report) when torch.distributed is not initialised, the group has one rank,
  or the report is empty. The input is never mutated.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import struct
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

import headroom

__all__ = ["max_memory_report", "gather", "KeyStats", "reduce_max_memory_across_pp_group", "forget_agreements"]

Number = Union[int, float, bool]
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_FLIP = 0x7FFFFFFFFFFFFFFF


def _type_tag(key: str, v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise headroom.invalid_argument(
                f"headroom.torch.stats: value {v} of key {key!r} does not fit in int64"
            )
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return "float" if v.is_floating_point() else "int"
    raise headroom.invalid_argument(
        f"headroom.torch.stats: key {key!r} has a value of type {type(v).__name__} ({v!r}); expected int, float or bool"
    )


def _encode(tag: str, v: Any) -> int:
    """int64 whose order is the value's order (floats: IEEE bits, negatives flipped)."""
    if isinstance(v, torch.Tensor):
        v = v.item()
    if tag == "float":
        (bits,) = struct.unpack("<q", struct.pack("<d", float(v)))
        return bits if bits >= 0 else bits ^ _FLIP
    return int(v)


def _decode(tag: str, x: int) -> Number:
    if tag == "float":
        bits = x if x >= 0 else x ^ _FLIP
        return struct.unpack("<d", struct.pack("<q", bits))[0]
    if tag == "bool":
        return bool(x)
    return int(x)


@dataclasses.dataclass(frozen=True)
class _Schema:
    keys: Tuple[str, ...]  # sorted: every rank lays its values out in the same order
    tags: Tuple[str, ...]
    fingerprint: int  # 62 bits, so that its negation fits in int64

    @staticmethod
    def of(report: Mapping[str, Any]) -> "_Schema":
        for k in report:
            if not isinstance(k, str):
                raise headroom.invalid_argument(f"headroom.torch.stats: key {k!r} is not a string")
        keys = tuple(sorted(report))
        tags = tuple(_type_tag(k, report[k]) for k in keys)
        digest = hashlib.blake2b(repr((keys, tags)).encode(), digest_size=8).digest()
        return _Schema(keys, tags, int.from_bytes(digest, "little") >> 2)


# group -> the schema every rank agreed on (so steady-state calls need one collective)
_agreed: Dict[Any, _Schema] = {}


def forget_agreements() -> None:
    """Drops the remembered key sets (the next call on each group compares them again)."""
    _agreed.clear()


def _group_key(group):
    return group if group is not None else dist.group.WORLD


def _device(group) -> torch.device:
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _global_rank(group, i: int) -> int:
    return i if group is None else dist.get_global_rank(group, i)


def _select(report: Optional[Mapping[str, Any]], keys: Optional[Iterable[str]]) -> Dict[str, Any]:
    if report is None:
        if not torch.cuda.is_available():
            raise headroom.invalid_argument(
                "headroom.torch.stats: no report given and CUDA is not available for torch.cuda.memory_stats(); "
                "pass a dict"
            )
        report = torch.cuda.memory_stats()
    if not isinstance(report, Mapping):
        raise headroom.invalid_argument(
            f"headroom.torch.stats: report of type {type(report).__name__}; expected a dict of name -> number"
        )
    if keys is None:
        return dict(report)
    out = {}
    for k in keys:
        if k not in report:
            raise headroom.invalid_argument(
                f"headroom.torch.stats: key {k!r} is not in the report ({len(report)} keys)"
            )
        out[k] = report[k]
    return out


def _active(group) -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def _agree(schema: _Schema, group) -> None:
    """Once per group (and after any disagreement): every rank's key set, compared everywhere."""
    gk = _group_key(group)
    if _agreed.get(gk) is not None:
        return
    n = dist.get_world_size(group)
    everyone: List[Any] = [None] * n
    dist.all_gather_object(everyone, (schema.keys, schema.tags), group=group)
    first = everyone[0]
    for i, other in enumerate(everyone):
        if other != first:
            raise headroom.collective_mismatch(_describe_mismatch(group, everyone))
    _agreed[gk] = schema


def _describe_mismatch(group, everyone) -> str:
    union = sorted(set().union(*(set(k) for k, _ in everyone)))
    parts = []
    for i, (keys, tags) in enumerate(everyone):
        have = dict(zip(keys, tags))
        missing = [k for k in union if k not in have]
        parts.append(
            f"rank {_global_rank(group, i)}: {len(keys)} keys"
            + (f", missing {missing[:8]}{'...' if len(missing) > 8 else ''}" if missing else "")
        )
    # keys present everywhere but typed differently
    typed = []
    for k in union:
        t = {dict(zip(keys, tags)).get(k) for keys, tags in everyone} - {None}
        if len(t) > 1:
            typed.append(f"{k!r} is {'/'.join(sorted(t))}")
    return (
        "headroom.torch.stats: the ranks of the group report different keys ("
        + "; ".join(parts)
        + (("; " + ", ".join(typed[:8])) if typed else "")
        + "); every rank must pass the same keys with the same types"
    )


def _collective(schema: _Schema, values: List[int], group, op) -> List[List[int]]:
    """One collective of [fingerprint, -fingerprint, values...]: ``op`` is "max" (all_reduce) or
    "gather" (all_gather). A rank whose schema is not the agreed one sends the agreed length with
    its own fingerprint and zeros, so the lengths always match and every rank sees the
    difference. All ranks changed the same way: they agree on the new keys and run it again."""
    gk = _group_key(group)
    agreed = _agreed[gk]
    own = schema == agreed
    payload = [schema.fingerprint, -schema.fingerprint] + (values if own else [0] * len(agreed.keys))
    t = torch.tensor(payload, dtype=torch.int64, device=_device(group))
    if op == "max":
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        rows = [t.tolist()]
        same = rows[0][0] == -rows[0][1]
    else:
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, t, group=group)
        rows = [p.tolist() for p in parts]
        same = all(r[0] == rows[0][0] for r in rows)
    if same and own:
        return [r[2:] for r in rows]
    _agreed.pop(gk, None)
    if same:  # every rank moved to the same new keys: a new agreement, then the real exchange
        _agree(schema, group)
        return _collective(schema, values, group, op)
    added = sorted(set(schema.keys) - set(agreed.keys))
    removed = sorted(set(agreed.keys) - set(schema.keys))
    detail = "this rank's keys differ from the keys the group agreed on" if not own else (
        "another rank's keys differ from the keys the group agreed on")
    raise headroom.collective_mismatch(
        f"headroom.torch.stats: the ranks of the group report different keys ({detail}"
        + (f"; added here: {added[:8]}" if added else "")
        + (f"; missing here: {removed[:8]}" if removed else "")
        + f"; {len(agreed.keys)} keys agreed); the next call compares the keys again"
    )


def max_memory_report(
    report: Optional[Mapping[str, Number]] = None,
    group=None,
    *,
    keys: Optional[Iterable[str]] = None,
) -> Dict[str, Number]:
    """Per-key MAX of ``report`` over the ranks of ``group`` (default: the default group).

    ``report`` defaults to ``torch.cuda.memory_stats()``; ``keys`` selects some of its keys (in
    that order). Returns a new dict in the report's key order. Raises
    :class:`headroom.collective_mismatch` on every rank when the ranks' keys differ,
    :class:`headroom.invalid_argument` for a value that is not an int, float or bool (or an int
    outside int64)."""
    chosen = _select(report, keys)
    if not chosen or not _active(group):
        for k, v in chosen.items():
            _type_tag(k, v)
        return dict(chosen)
    schema = _Schema.of(chosen)
    _agree(schema, group)
    encoded = [_encode(tag, chosen[k]) for k, tag in zip(schema.keys, schema.tags)]
    (reduced,) = _collective(schema, encoded, group, "max")
    by_key = {k: _decode(tag, x) for k, tag, x in zip(schema.keys, schema.tags, reduced)}
    return {k: by_key[k] for k in chosen}


@dataclasses.dataclass(frozen=True)
class KeyStats:
    """One key across the group: every rank's value (by group rank), and its summary."""

    values: Tuple[Number, ...]
    max: Number
    min: Number
    mean: float
    argmax_rank: int  # global rank holding the max (the lowest on ties)
    argmin_rank: int


def gather(
    report: Optional[Mapping[str, Number]] = None,
    group=None,
    *,
    keys: Optional[Iterable[str]] = None,
) -> Dict[str, KeyStats]:
    """Every rank's value of every key, with max / min / mean / arg-max rank, in one all_gather
    after the key agreement. Same defaults and errors as :func:`max_memory_report`."""
    chosen = _select(report, keys)
    if not chosen:
        return {}
    schema = _Schema.of(chosen)
    if not _active(group):
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        return {k: _summary(k, [chosen[k]], [rank]) for k in chosen}
    _agree(schema, group)
    n = dist.get_world_size(group)
    encoded = [_encode(tag, chosen[k]) for k, tag in zip(schema.keys, schema.tags)]
    table = _collective(schema, encoded, group, "gather")
    ranks = [_global_rank(group, i) for i in range(n)]
    out = {}
    for j, (k, tag) in enumerate(zip(schema.keys, schema.tags)):
        out[k] = _summary(k, [_decode(tag, row[j]) for row in table], ranks)
    return {k: out[k] for k in chosen}


def _summary(key, values: Sequence[Number], ranks: Sequence[int]) -> KeyStats:
    if isinstance(values[0], torch.Tensor):
        values = [v.item() for v in values]
    hi = max(range(len(values)), key=lambda i: (values[i], -i))
    lo = min(range(len(values)), key=lambda i: (values[i], i))
    if all(isinstance(v, int) for v in values):
        mean = sum(values) / len(values)  # exact sum of Python ints, one rounding
    else:
        mean = math.fsum(float(v) for v in values) / len(values)
    return KeyStats(tuple(values), values[hi], values[lo], mean, ranks[hi], ranks[lo])


def reduce_max_memory_across_pp_group(memory_report: Dict[str, Number], pp_group) -> Dict[str, Number]:
    """Megatron-Bridge's ``reduce_max_memory_across_pp_group(memory_report, pp_group)``, exact:
    the per-metric MAX across ``pp_group``; the report unchanged when it is empty, distributed is
    not initialised or the group has one rank."""
    if not memory_report or not (dist.is_available() and dist.is_initialized()):
        return memory_report
    size = getattr(pp_group, "size", None)
    if not callable(size) or size() <= 1:
        return memory_report
    return max_memory_report(memory_report, pp_group)
