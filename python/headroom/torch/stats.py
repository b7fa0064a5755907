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
* Steady state: after a call that reduced, the group remembers the keys in the caller's order
  and the exact type of each value (int, float or bool). A later call whose dict has the same
  keys in the same order and values of the same types is packed into the same wire words in one
  C++ pass over the dict (``headroom.stats.pack_dict_values``, no report built from the key
  strings, no sorting) and read back into a new dict in one pass (``unpack_dict_values``);
  anything else (other keys, another order, a changed type, a tensor value, an int outside
  int64, a reduced header that is not this rank's) takes the general path, which gives the same
  result or raises the same error.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np
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
# group -> the steady state of the last call that reduced (its keys in the caller's order)
_fast: Dict[Any, "_Fast"] = {}


def forget_agreements() -> None:
    """Drops the remembered key sets (the next call on each group compares them again)."""
    _agreed.clear()
    _fast.clear()


def _forget(gk) -> None:
    _agreed.pop(gk, None)
    _fast.pop(gk, None)


_KEY_MAX = np.int64(2**63 - 1)  # headroom.stats' order keys (stats/detail/order_key.hpp)
_KEY_MIN = np.int64(-(2**63))
_KIND_OF_TYPE = {int: b"i", bool: b"b", float: b"f"}  # the exact types of the steady state


class _Kind:
    """The values of one Python type within a report: where they sit in the caller's order
    (``pos``) and their wire slots (``slot``, 0-based after the header)."""

    __slots__ = ("pos", "slot")

    def __init__(self, pos: List[int], slot: List[int]):
        self.pos = np.asarray(pos, dtype=np.intp)
        self.slot = np.asarray(slot, dtype=np.intp)


class _Fast:
    """One group's steady state: the keys in the caller's order with the exact type of each
    value, as the group last reduced them, and the wire words laid out for them.
    ``headroom.stats.pack_dict_values`` writes a dict with exactly these keys, order and types
    into the words ``pack_max`` / ``pack_gather`` write for the sorted schema's report, in one
    pass and without building a report from the key strings; ``unpack_dict_values`` reads the
    typed result back when the reduced header is this rank's."""

    __slots__ = ("schema", "plan", "keys", "kinds", "slots", "n", "rank", "size", "nccl", "max_template",
                 "max_header", "gather_template", "gather_header", "ints", "bools", "floats")

    def __init__(self, schema: _Schema, plan, keys: Tuple[str, ...], types: Tuple[type, ...], schema_hash: int,
                 rank: int, size: int, nccl: bool):
        self.schema, self.plan, self.keys = schema, plan, keys
        self.kinds = b"".join(_KIND_OF_TYPE[t] for t in types)
        self.n = n = len(keys)
        self.rank, self.size, self.nccl = rank, size, nccl
        slot_of = {k: i for i, k in enumerate(schema.keys)}
        self.slots = np.array([slot_of[k] for k in keys], dtype=np.int64)
        h = schema_hash - 2**64 if schema_hash >= 2**63 else schema_hash  # uint64 -> the int64 word
        self.max_header = np.array([h, ~h, n, ~n, -1, 0], dtype=np.int64)  # hash, ~hash, count, ~count, writer, ~writer
        self.max_template = np.full(plan.max_words(), _KEY_MIN, dtype=np.int64)  # unused slots: neutral for max
        self.max_template[:6] = self.max_header
        self.gather_header = [h, n, -1]
        self.gather_template = np.zeros(plan.gather_words_per_rank(), dtype=np.int64)
        self.gather_template[:3] = self.gather_header
        by_type: Dict[type, Tuple[List[int], List[int]]] = {int: ([], []), bool: ([], []), float: ([], [])}
        for j, (k, t) in enumerate(zip(keys, types)):
            by_type[t][0].append(j)
            by_type[t][1].append(slot_of[k])
        self.ints, self.bools, self.floats = (_Kind(*by_type[t]) if by_type[t][0] else None for t in (int, bool, float))

    @staticmethod
    def make(schema: _Schema, plan, chosen: Mapping[str, Any], schema_hash: int, group) -> Optional["_Fast"]:
        keys = tuple(chosen)
        types = tuple(map(type, chosen.values()))
        if type(chosen) is not dict or not all(t in _KIND_OF_TYPE for t in types):
            return None  # tensors, numpy scalars, float subclasses: the general path every time
        nccl = "nccl" in str(dist.get_backend(group)).lower()
        return _Fast(schema, plan, keys, types, schema_hash, dist.get_rank(group), dist.get_world_size(group), nccl)

    def pack_max(self, chosen: Dict[str, Any]) -> Optional[np.ndarray]:
        """max's words for ``chosen``; None unless it has this state's keys, order and types
        (and its ints fit int64)."""
        words = self.max_template.copy()
        return words if hstats.pack_dict_values(chosen, self.keys, self.kinds, self.slots, words, 6, True) else None

    def pack_gather(self, chosen: Dict[str, Any]) -> Optional[np.ndarray]:
        words = self.gather_template.copy()
        return words if hstats.pack_dict_values(chosen, self.keys, self.kinds, self.slots, words, 3, False) else None

    def unpack_max(self, reduced: np.ndarray) -> Optional[Dict[str, Number]]:
        """The typed result in the caller's order, or None when the reduced header is not this
        rank's (another rank's keys differ: the general check raises the error)."""
        return hstats.unpack_dict_values(reduced, self.max_header, self.keys, self.kinds, self.slots, 6, True)

    def _objects(self, w: np.ndarray) -> np.ndarray:
        """Python values (int, bool, float) in the caller's order from gather's wire slots ``w``
        (ranks x slots, raw bits)."""
        out = np.empty(w.shape[:-1] + (self.n,), dtype=object)
        if self.ints is not None:
            out[..., self.ints.pos] = w[..., self.ints.slot]
        if self.bools is not None:
            out[..., self.bools.pos] = w[..., self.bools.slot] != 0
        if self.floats is not None:
            out[..., self.floats.pos] = w[..., self.floats.slot].view(np.float64)
        return out

    def order_keys(self, w: np.ndarray, op: str) -> np.ndarray:
        """headroom.stats' order keys (max or min as a max, NaN propagating) of raw slots ``w``
        (ranks x slots), in the caller's order: what the C++ gather ranks the values by."""
        k = np.empty(w.shape[:-1] + (self.n,), dtype=np.int64)
        for kind in (self.ints, self.bools):
            if kind is not None:
                k[..., kind.pos] = w[..., kind.slot] if op == "max" else ~w[..., kind.slot]
        if self.floats is not None:
            b = w[..., self.floats.slot]
            f = b.view(np.float64)
            e = b ^ ((b >> 63) & _KEY_MAX)
            if op != "max":
                e = ~e
            e[np.isnan(f)] = _KEY_MAX
            k[..., self.floats.pos] = e
        return k


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


def _collective(schema: _Schema, values: Mapping[str, Any], group, op: str,
                fast: Optional[_Fast] = None, words: Optional[np.ndarray] = None):
    """One collective of headroom.stats' wire words for the agreed plan: "max" (all_reduce MAX,
    returns the typed dict in the caller's order) or "gather" (all_gather, returns the
    KeyStats dict). Every rank packs its own keys into the same number of words, so a rank whose
    keys changed still meets the others and every rank gets the same error after the
    collective. Keys that outgrew the plan on every rank (capacity_error everywhere): the ranks
    agree again and run it once more. ``fast`` and ``words``: the steady state's words (packed
    by ``fast`` from ``values``); the general path builds a C++ report from the keys."""
    gk = _group_key(group)
    agreed, plan = _agreed[gk]
    r = None
    if fast is not None:
        rank, size = fast.rank, fast.size
        device = torch.device("cuda", torch.cuda.current_device()) if fast.nccl else None
    else:
        r = schema.report(values)
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        device = _device(group)
    try:
        if op == "max":
            t = torch.from_numpy(words if fast is not None else hstats.pack_max(r, plan))
            if device is not None and device.type != "cpu":
                t = t.to(device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
            reduced = t.cpu().numpy()
            out = fast.unpack_max(reduced) if fast is not None else None
            if out is None:  # the general path, or a header that is not ours: C++ checks and names it
                r = r if r is not None else schema.report(values)
                by_key = hstats.unpack_max(r, reduced, plan, rank, size).as_dict()
                tags = dict(zip(schema.keys, schema.tags))
                out = {k: _typed(tags[k], by_key[k]) for k in values}
        else:
            t = torch.from_numpy(words if fast is not None else hstats.pack_gather(r, plan))
            if device is not None and device.type != "cpu":
                t = t.to(device)
            parts = [torch.empty_like(t) for _ in range(size)]
            dist.all_gather(parts, t, group=group)
            gathered = torch.cat(parts).cpu().numpy()
            out = _fast_gather(fast, gathered, group) if fast is not None else None
            if out is None:
                r = r if r is not None else schema.report(values)
                table = hstats.unpack_gather(r, gathered, plan, rank, size)
                out = _table_stats(schema, values, table, group)
    except headroom.capacity_error:
        _forget(gk)  # the same on every rank: agree on the new keys (or name them), redo
        _agree(schema, group)
        return _collective(schema, values, group, op)
    except headroom.collective_mismatch as e:
        _forget(gk)
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
    if fast is None:  # the next call with these keys, in this order, with these types: the fast path
        made = _Fast.make(schema, plan, values, r.schema_hash, group)
        if made is None:
            _fast.pop(gk, None)
        else:
            _fast[gk] = made
    return out




def _table_stats(schema: _Schema, chosen: Mapping[str, Any], table, group) -> Dict[str, "KeyStats"]:
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


def _fast_gather(fast: _Fast, gathered: np.ndarray, group) -> Optional[Dict[str, "KeyStats"]]:
    """gather's KeyStats from the rank-major words, the C++ unpack_gather's values, max / min
    (the holder's value; ties: the lowest rank) and argmax / argmin; None when a rank's header
    is not this rank's (the C++ check raises the error)."""
    per = fast.plan.gather_words_per_rank()
    m = gathered.reshape(fast.size, per)
    if m[:, :3].tolist() != [fast.gather_header] * fast.size:
        return None
    w = m[:, 3:3 + fast.n]
    columns = fast._objects(w).T.tolist()  # per key (caller's order): every rank's value
    argmax = fast.order_keys(w, "max").argmax(axis=0).tolist()  # first maximum: the lowest rank
    argmin = fast.order_keys(w, "min").argmax(axis=0).tolist()
    ranks = [_global_rank(group, i) for i in range(fast.size)]
    n = fast.size
    out = {}
    for k, kind, col, hi, lo in zip(fast.keys, fast.kinds, columns, argmax, argmin):
        values = tuple(col)
        # the mean from the exact values: a sum of Python ints (or fsum of floats), one rounding
        mean = math.fsum(values) / n if kind == ord("f") else sum(values) / n
        out[k] = KeyStats(values, values[hi], values[lo], mean, ranks[hi], ranks[lo])
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
    # a dict is read as it is (never mutated, never returned): no copy of it on the way
    chosen = report if keys is None and type(report) is dict else _select(report, keys)
    if not chosen or not _active(group):
        for k, v in chosen.items():
            _type_tag(k, v)
        return dict(chosen)
    fast = _fast.get(_group_key(group))
    if fast is not None:
        words = fast.pack_max(chosen)
        if words is not None:
            return _collective(fast.schema, chosen, group, "max", fast, words)
    schema = _Schema.of(chosen)
    _agree(schema, group)
    return _collective(schema, chosen, group, "max")


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
    if not chosen:
        return {}
    if _active(group):
        fast = _fast.get(_group_key(group))
        if fast is not None:
            words = fast.pack_gather(chosen)
            if words is not None:
                return _collective(fast.schema, chosen, group, "gather", fast, words)
    schema = _Schema.of(chosen)
    if not _active(group):
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        alone = {k: v.item() if isinstance(v, torch.Tensor) else v for k, v in chosen.items()}
        return {k: KeyStats((v,), v, v, float(v), rank, rank) for k, v in alone.items()}
    _agree(schema, group)
    return _collective(schema, chosen, group, "gather")


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
