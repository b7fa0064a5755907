# SPDX-License-Identifier: Apache-2.0
"""Memory statistics reduced across a process group: exact, typed, and an error rather than a hang.

``max_memory_report(report, group)`` takes a dict of numbers (default: every key of
``torch.cuda.memory_stats()``) and returns the per-key MAX over the ranks of ``group``, in one
collective. ``gather(report, group)`` returns, per key, every rank's value with max, min, mean and
the rank that holds the max. ``reduce_max_memory_across_pp_group(memory_report, pp_group)`` is a
drop-in for Megatron-Bridge's function of that name (same arguments, same result), exact where it
is not. ``Phases`` records the peak of each phase of a step (``with phases("forward"):``), and
``training_log_memory`` is a drop-in for the memory lines of Megatron-Bridge's ``training_log``:
the world's peak of every key and the rank that holds it, in one collective.

* Exact: the reduction is :mod:`headroom.stats`' (the C++ reducer's int64 wire words: integers
  never pass through floating point, doubles bit-exact), so counters above 2^53 keep every
  digit; ints come back as int, floats as float, bools as bool.
* Agreement: the first call on a group compares the ranks' key sets (one ``all_gather_object``,
  naming the keys each rank lacks) and sizes the wire for them; every later call is one
  ``all_reduce`` (``gather``: one ``all_gather``) whose header carries the keys' schema (names,
  order, int / bool / float), so a rank whose keys or types changed makes every rank raise
  :class:`headroom.collective_mismatch`, with the group still usable.
* A bad value on one rank (a str, an int past int64, a numpy datetime) is carried in the same
  collective as the data: every rank raises :class:`headroom.invalid_argument` naming that rank
  ("rank q of n": its rank in the group), the key and the value, and the group is ready for the next call. No
  rank raises before the collective, so none is left waiting and none is paired with a later
  call.
* A rank that dies: the others get the process group's error (its timeout, set by the caller in
  ``init_process_group``) as :class:`headroom.group_aborted`, not a hang.
* No-op (a copy of the report) when torch.distributed is not initialised or the group has one
  rank. An empty report still joins the collective, so a rank whose report is empty while the
  others' are not raises with them instead of leaving them waiting. The input is never mutated.
* Steady state: after a call that reduced, the group remembers the keys in the caller's order
  and each value's type (:class:`headroom.stats.SteadyState`, the C++ layout); a later call with
  the same keys, order and types is packed and read back in one C++ pass each. Anything else
  takes the general path, which gives the same result or raises the same error.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist

import headroom
from headroom import stats as hstats

__all__ = ["max_memory_report", "gather", "KeyStats", "reduce_max_memory_across_pp_group", "forget_agreements",
           "Phases", "training_log_memory"]

Number = Union[int, float, bool]


@dataclasses.dataclass(frozen=True)
class _Agreed:
    keys: Tuple[str, ...]  # sorted: every rank lays its values out in the same order
    plan: Any


@dataclasses.dataclass
class _Fast:
    state: Any  # headroom.stats.SteadyState
    rank: int
    size: int
    device: Optional[torch.device]

    def pack(self, values: Dict[str, Any], op: str) -> Optional[np.ndarray]:
        """The words of ``values`` when it has this state's keys, order and types, else None."""
        return self.state.pack_max(values) if op == "max" else self.state.pack_gather(values)


_agreed: Dict[Any, _Agreed] = {}  # group -> the keys every rank agreed on, and the wire plan
_fast: Dict[Any, _Fast] = {}  # group -> the steady state of the last call that reduced


def forget_agreements() -> None:
    """Drops the remembered key sets (the next call on each group compares them again)."""
    _agreed.clear()
    _fast.clear()


def _forget(gk) -> None:
    _agreed.pop(gk, None)
    _fast.pop(gk, None)


def _group_key(group):
    return group if group is not None else dist.group.WORLD


def _device(group) -> Optional[torch.device]:
    if "nccl" in str(dist.get_backend(group)).lower():
        return torch.device("cuda", torch.cuda.current_device())
    return None


def _global_rank(group, i: int) -> int:
    return i if group is None else dist.get_global_rank(group, i)


def _plain(v: Any) -> Any:
    """A one-element tensor as its Python number (torch glue); anything else as it is."""
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return v.item()
    return v


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


def _checked(values: Mapping[str, Any]):
    return hstats.CheckedReport({k: _plain(v) for k, v in values.items()}, sort=True)


def _aborted(e: Exception, group) -> headroom.group_aborted:
    return headroom.group_aborted(
        f"headroom.torch.stats: the collective over a group of {dist.get_world_size(group)} ranks failed "
        f"(a rank died or timed out; the process group's timeout applies): {e}"
    )


def _agree(checked, group) -> _Agreed:
    """Once per group (and after any disagreement): every rank's keys, types and validity,
    compared everywhere (one all_gather_object)."""
    gk = _group_key(group)
    if gk in _agreed:
        return _agreed[gk]
    everyone: List[Any] = [None] * dist.get_world_size(group)
    try:
        dist.all_gather_object(everyone, (tuple(checked.keys()), tuple(checked.kinds()), checked.fault), group=group)
    except RuntimeError as e:
        raise _aborted(e, group) from e
    for i, (_, _, fault) in enumerate(everyone):
        if fault is not None:  # worded as the C++ reducer's error: the rank in the group
            raise headroom.invalid_argument(
                f"headroom.torch.stats: rank {i} of {len(everyone)} has a value that is not a statistic ({fault}); "
                "no rank reduced, and the group is ready for the next call"
            )
    if any(e[:2] != everyone[0][:2] for e in everyone):
        raise headroom.collective_mismatch(_describe_mismatch(group, everyone))
    agreed = _Agreed(tuple(checked.keys()), hstats.ReducePlan(max(1, len(checked))))
    _agreed[gk] = agreed
    return agreed


def _describe_mismatch(group, everyone) -> str:
    union = sorted(set().union(*(set(k) for k, _, _ in everyone)))
    parts = []
    for i, (keys, _, _) in enumerate(everyone):
        missing = [k for k in union if k not in keys]
        parts.append(
            f"rank {_global_rank(group, i)}: {len(keys)} keys"
            + (f", missing {missing[:8]}{'...' if len(missing) > 8 else ''}" if missing else "")
        )
    typed = []
    for k in union:
        t = {dict(zip(keys, kinds)).get(k) for keys, kinds, _ in everyone} - {None}
        if len(t) > 1:
            typed.append(f"{k!r} is {'/'.join(sorted(t))}")
    return (
        "headroom.torch.stats: the ranks of the group report different keys ("
        + "; ".join(parts)
        + (("; " + ", ".join(typed[:8])) if typed else "")
        + "); every rank must pass the same keys with the same types"
    )


def _run(words: np.ndarray, group, device, op: str, size: int) -> np.ndarray:
    """One collective of the wire words: all_reduce(MAX) or all_gather (rank-major)."""
    t = torch.from_numpy(words)
    if device is not None:
        t = t.to(device)
    try:
        if op == "max":
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
            return t.cpu().numpy()
        parts = [torch.empty_like(t) for _ in range(size)]
        dist.all_gather(parts, t, group=group)
        return torch.cat(parts).cpu().numpy()
    except RuntimeError as e:
        raise _aborted(e, group) from e


def _key_stats(group, keys, columns) -> Dict[str, "KeyStats"]:
    """KeyStats from (every rank's value, argmax, argmin) per key."""
    out = {}
    for k, (values, hi, lo) in zip(keys, columns):
        # the mean from the exact values: a sum of Python ints (or fsum of floats), one rounding
        floats = any(type(v) is float for v in values)
        mean = (math.fsum(values) if floats else sum(values)) / len(values)
        out[k] = KeyStats(tuple(values), values[hi], values[lo], mean, _global_rank(group, hi),
                          _global_rank(group, lo))
    return out


def _unpack(checked, got: np.ndarray, plan, rank: int, size: int, op: str, values: Mapping[str, Any], group):
    """The C++ checks and result of one collective's words (the same verdict on every rank)."""
    if op == "max":
        typed = checked.typed(hstats.unpack_max(checked, got, plan, rank, size))
        return {k: typed[k] for k in values}
    table = hstats.unpack_gather(checked, got, plan, rank, size)
    bools = {k for k, kind in zip(checked.keys(), checked.kinds()) if kind == "bool"}
    columns = []
    for k in values:
        row = table[k]
        columns.append((tuple(bool(v) for v in row.per_rank) if k in bools else tuple(row.per_rank),
                        row.argmax, row.argmin))
    return _key_stats(group, list(values), columns)


def _reduce(values: Dict[str, Any], group, op: str):
    """One collective ("max": all_reduce MAX, "gather": all_gather) of the C++ wire words, by
    the steady state when ``values`` has its keys, order and types, else from the checked report
    of the sorted keys. Whatever the path, every rank gets the same words and so the same
    verdict: a result, or the same error (then the group has done the same collectives)."""
    gk = _group_key(group)
    fast = _fast.get(gk)
    words = None
    if fast is not None:
        words = fast.pack(values, op)
    if words is not None:
        got = _run(words, group, fast.device, op, fast.size)
        if op == "max":
            out = fast.state.unpack_max(got)
        else:
            columns = fast.state.unpack_gather(got)
            out = None if columns is None else _key_stats(group, fast.state.keys, columns)
        if out is not None:
            return out
        # a header that is not ours: the C++ checks of the same words say why
        checked, agreed, rank, size = _checked(values), _agreed[gk], fast.rank, fast.size
    else:
        checked = _checked(values)
        agreed = _agree(checked, group)
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        packed = (hstats.pack_max(checked, agreed.plan, -1, "propagate", rank) if op == "max"
                  else hstats.pack_gather(checked, agreed.plan, -1, rank))
        got = _run(packed, group, _device(group), op, size)
    try:
        out = _unpack(checked, got, agreed.plan, rank, size, op, values, group)
    except headroom.capacity_error:
        _forget(gk)  # the same on every rank: agree on the new keys (or name them), redo
        return _reduce(values, group, op)
    except headroom.collective_mismatch as e:
        _forget(gk)
        added = sorted(set(checked.keys()) - set(agreed.keys))
        removed = sorted(set(agreed.keys) - set(checked.keys()))
        detail = ("this rank's keys differ from the keys the group agreed on" if (added or removed)
                  else "another rank's keys or types differ from the ones the group agreed on")
        raise headroom.collective_mismatch(
            f"headroom.torch.stats: the ranks of the group report different keys ({detail}"
            + (f"; added here: {added[:8]}" if added else "")
            + (f"; missing here: {removed[:8]}" if removed else "")
            + f"; {len(agreed.keys)} keys agreed; {e}); the next call compares the keys again"
        ) from e
    _agreed[gk] = _Agreed(tuple(checked.keys()), agreed.plan)  # every rank reduced these keys
    state = hstats.SteadyState.of(values, agreed.plan, rank, size) if type(values) is dict else None
    if state is None:
        _fast.pop(gk, None)
    else:
        _fast[gk] = _Fast(state, rank, size, _device(group))
    return out


def max_memory_report(
    report: Optional[Mapping[str, Number]] = None,
    group=None,
    *,
    keys: Optional[Iterable[str]] = None,
) -> Dict[str, Number]:
    """Per-key MAX of ``report`` over the ranks of ``group`` (default: the default group).

    ``report`` defaults to ``torch.cuda.memory_stats()``; ``keys`` selects some of its keys (in
    that order). Returns a new dict in the report's key order. Raises on every rank:
    :class:`headroom.collective_mismatch` when the ranks' keys or value types differ,
    :class:`headroom.invalid_argument` naming the rank, key and value when a rank's value is not
    an int, float or bool (or an int outside int64); :class:`headroom.group_aborted` when the
    collective fails (a rank died)."""
    # a dict is read as it is (never mutated, never returned): no copy of it on the way
    chosen = report if keys is None and type(report) is dict else _select(report, keys)
    if not _active(group):
        checked = _checked(chosen)
        if checked.fault is not None:
            raise headroom.invalid_argument(f"headroom.torch.stats: {checked.fault}")
        return dict(chosen)
    return _reduce(chosen, group, "max")  # an empty report joins too: no rank is left waiting


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
    chosen = report if keys is None and type(report) is dict else _select(report, keys)
    if _active(group):
        return _reduce(chosen, group, "gather")
    checked = _checked(chosen)
    if checked.fault is not None:
        raise headroom.invalid_argument(f"headroom.torch.stats: {checked.fault}")
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    alone = {k: _plain(v) for k, v in chosen.items()}
    return {k: KeyStats((v,), v, v, float(v), rank, rank) for k, v in alone.items()}


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


# ---- peaks per phase ---------------------------------------------------------------------------

def _cuda_reset() -> None:
    torch.cuda.reset_peak_memory_stats()


def _cuda_peaks() -> Dict[str, int]:
    return {"allocated_bytes.all.peak": torch.cuda.max_memory_allocated(),
            "reserved_bytes.all.peak": torch.cuda.max_memory_reserved()}


class Phases:
    """Peaks per phase of a training step (:class:`headroom.stats.PhasePeaks` holds them)::

        phases = Phases()                       # torch.cuda's peak counters
        with phases("forward"): ...             # resets the peaks, records them at the end
        with phases("backward"): ...
        with phases("optimizer"): ...
        table = phases.reduce(group)            # one all_gather: per "<phase>/<key>" KeyStats

    A phase entered several times before ``reduce`` (one forward per micro-batch) keeps its
    highest peak. Phases do not nest (``headroom.logic_error``). ``reset`` and ``read`` replace
    torch.cuda's counters (``read`` returns a dict whose keys ending in ".peak" are recorded).
    Every rank of the group must run the same phases between two ``reduce`` calls."""

    def __init__(self, reset: Optional[Callable[[], None]] = None,
                 read: Optional[Callable[[], Mapping[str, Number]]] = None):
        self._peaks = hstats.PhasePeaks()
        self._reset = reset if reset is not None else _cuda_reset
        self._read = read if read is not None else _cuda_peaks

    @contextlib.contextmanager
    def __call__(self, name: str):
        self._peaks.open(name)
        try:
            self._reset()
            yield self
        finally:
            self._peaks.close(self._read())

    def report(self) -> Dict[str, Number]:
        """This rank's peaks so far, "<phase>/<key>" in the order first recorded."""
        return self._peaks.report().as_dict()

    def reduce(self, group=None) -> Dict[str, KeyStats]:
        """Every phase's peak across ``group`` with the rank holding it (one all_gather), then
        a fresh step."""
        out = gather(self.report(), group)
        self._peaks.clear()
        return out


def training_log_memory(memory_report: Mapping[str, Number], group=None, *, phases: Optional[Phases] = None,
                        prefix: str = "memory/") -> Dict[str, Number]:
    """The memory lines of Megatron-Bridge's ``training_log``, over any group (default: the
    world) in one collective: for each key of ``memory_report`` (and each phase peak of
    ``phases``), ``{prefix}{key}`` is the group's max and ``{prefix}{key}.rank`` the global rank
    holding it. Replaces, on every rank::

        memory_report = reduce_max_memory_across_pp_group(memory_report, pg_collection.pp)
        memory_report = {f"memory/{k}": v for k, v in memory_report.items()}

    with ``memory_report = training_log_memory(memory_report)``; the writer rank logs it."""
    values = dict(memory_report)
    if phases is not None:
        values.update(phases.report())
    table = gather(values, group)
    if phases is not None:
        phases._peaks.clear()
    out: Dict[str, Number] = {}
    for k, s in table.items():
        out[f"{prefix}{k}"] = s.max
        out[f"{prefix}{k}.rank"] = s.argmax_rank
    return out
