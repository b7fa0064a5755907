"""Memory statistics reduced across a process group: exact, typed, and an error rather than a hang.

``max_memory_report(report, group)`` takes a dict of numbers (default: every key of
``torch.cuda.memory_stats()``) and returns the per-key MAX over the ranks of ``group``, in one
collective. ``gather(report, group)`` returns, per key, every rank's value with max, min, mean and
the rank that holds the max. ``reduce_max_memory_across_pp_group(memory_report, pp_group)`` is a
drop-in for Megatron-Bridge's function of that name (same arguments, same result), exact where it
is not.

* Exact: the reduction is :mod:`headroom.stats`' (the C++ reducer's int64 wire words: integers
  never pass through floating point, doubles bit-exact), so counters above 2^53 keep every
  digit; ints come back as int, floats as float, bools as bool.
* Agreement: the first call on a group compares the ranks' key sets (one ``all_gather_object``,
  naming the keys each rank lacks) and sizes the wire for them; every later call is one
  ``all_reduce`` (``gather``: one ``all_gather``) whose header carries the keys' hash, so a rank
  whose keys changed makes every rank raise :class:`headroom.collective_mismatch`, with the
  group still usable. Differing keys are never a hang and never silently mixed.
* No-op (a copy of the report) when torch.distributed is not initialised, the group has one rank,
  or the report is empty. The input is never mutated.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import torch
import torch.distributed as dist

import headroom
from headroom import stats as hstats

__all__ = ["max_memory_report", "gather", "KeyStats", "reduce_max_memory_across_pp_group", "forget_agreements"]

Number = Union[int, float, bool]
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


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


def _plain(tag: str, v: Any) -> Number:
    """What headroom.stats carries: int64 or float64 (bools as 0 / 1)."""
    if isinstance(v, torch.Tensor):
        v = v.item()
    return float(v) if tag == "float" else int(v)


def _typed(tag: str, v: Number) -> Number:
    return bool(v) if tag == "bool" else v


@dataclasses.dataclass(frozen=True)
class _Schema:
    keys: Tuple[str, ...]  # sorted: every rank lays its values out in the same order
    tags: Tuple[str, ...]

    @staticmethod
    def of(report: Mapping[str, Any]) -> "_Schema":
        for k in report:
            if not isinstance(k, str):
                raise headroom.invalid_argument(f"headroom.torch.stats: key {k!r} is not a string")
        keys = tuple(sorted(report))
        return _Schema(keys, tuple(_type_tag(k, report[k]) for k in keys))

    def report(self, values: Mapping[str, Any]):
        return hstats.report({k: _plain(t, values[k]) for k, t in zip(self.keys, self.tags)})


# group -> (the schema every rank agreed on, the wire plan sized for it)
_agreed: Dict[Any, Tuple[_Schema, Any]] = {}


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
    _agreed[gk] = (schema, hstats.ReducePlan(max(1, len(schema.keys))))


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


def _collective(schema: _Schema, values: Mapping[str, Any], group, op: str):
    """One collective of headroom.stats' wire words for the agreed plan: "max" (all_reduce MAX,
    returns a dict) or "gather" (all_gather, returns a RankTable). Every rank packs its own
    keys into the same number of words, so a rank whose keys changed still meets the others and
    every rank gets the same error after the collective. Keys that outgrew the plan on every
    rank (capacity_error everywhere): the ranks agree again and run it once more."""
    gk = _group_key(group)
    agreed, plan = _agreed[gk]
    r = schema.report(values)
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    device = _device(group)
    try:
        if op == "max":
            t = torch.from_numpy(hstats.pack_max(r, plan)).to(device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
            out = hstats.unpack_max(r, t.cpu().numpy(), plan, rank, size).as_dict()
        else:
            t = torch.from_numpy(hstats.pack_gather(r, plan)).to(device)
            parts = [torch.empty_like(t) for _ in range(size)]
            dist.all_gather(parts, t, group=group)
            out = hstats.unpack_gather(r, torch.cat(parts).cpu().numpy(), plan, rank, size)
    except headroom.capacity_error:
        _agreed.pop(gk, None)  # the same on every rank: agree on the new keys (or name them), redo
        _agree(schema, group)
        return _collective(schema, values, group, op)
    except headroom.collective_mismatch as e:
        _agreed.pop(gk, None)
        added = sorted(set(schema.keys) - set(agreed.keys))
        removed = sorted(set(agreed.keys) - set(schema.keys))
        detail = ("this rank's keys differ from the keys the group agreed on" if (added or removed)
                  else "another rank's keys differ from the keys the group agreed on")
        raise headroom.collective_mismatch(
            f"headroom.torch.stats: the ranks of the group report different keys ({detail}"
            + (f"; added here: {added[:8]}" if added else "")
            + (f"; missing here: {removed[:8]}" if removed else "")
            + f"; {len(agreed.keys)} keys agreed; {e}); the next call compares the keys again"
        ) from e
    _agreed[gk] = (schema, plan)  # every rank reduced these keys: they are the agreed ones now
    return out


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
    by_key = _collective(schema, chosen, group, "max")
    tags = dict(zip(schema.keys, schema.tags))
    return {k: _typed(tags[k], by_key[k]) for k in chosen}


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
        alone = {k: v.item() if isinstance(v, torch.Tensor) else v for k, v in chosen.items()}
        return {k: KeyStats((v,), v, v, float(v), rank, rank) for k, v in alone.items()}
    _agree(schema, group)
    table = _collective(schema, chosen, group, "gather")
    ranks = [_global_rank(group, i) for i in range(dist.get_world_size(group))]
    tags = dict(zip(schema.keys, schema.tags))
    out = {}
    for k in chosen:
        row = table[k]
        values = tuple(_typed(tags[k], v) for v in row.per_rank)
        # the mean from the exact values: a sum of Python ints (or fsum of floats), one rounding
        mean = sum(values) / len(values) if tags[k] != "float" else math.fsum(values) / len(values)
        out[k] = KeyStats(values, _typed(tags[k], row.max), _typed(tags[k], row.min), mean,
                          ranks[row.argmax], ranks[row.argmin])
    return out


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
