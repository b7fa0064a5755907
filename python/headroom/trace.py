# SPDX-License-Identifier: Apache-2.0
"""headroom.trace: memory_viz snapshots from Python.

A ``Recorder`` takes allocator events (``alloc``, ``free``, ``free_requested``, ``free_completed``,
``segment_alloc``, ``segment_free``) as they happen, or replayed from a list; its ``snapshot()``
holds the live segments and blocks and the recorded events, and writes the pickle PyTorch's
memory_viz opens (https://pytorch.org/memory_viz, ``torch.cuda._memory_viz.trace_plot``) or a
self-contained SVG. The recorder, snapshot and pickle writer are the C++ ones
(``headroom._core.trace``); torch is not needed to write a snapshot.

``free`` is an ordinary free; the snapshot writes it ``free_requested`` + ``free_completed``, as
PyTorch does (the viewer merges the pair). ``free_requested`` and, later, ``free_completed`` is a
deferred (``record_stream``-style) free: the block is pending in between. Blocks live before
``start()`` get a synthetic ``alloc`` at the start of the trace (``Snapshot.synthetic`` counts
them); allocations the full live table had no room for are left out (``untracked``). Event times
(``time_us``) are Unix-epoch microseconds, as PyTorch's.

    >>> from headroom import trace
    >>> snap = trace.snapshot_of([("segment_alloc", 0x10000, 4096, "pool"),
    ...                           ("alloc", 0x10000, 1024, "activation"),
    ...                           ("alloc", 0x10400, 512, "activation")])
    >>> snap.reserved_bytes, snap.active_bytes
    (4096, 1536)
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional

from ._core.trace import Recorder, Snapshot

__all__ = ["Recorder", "Snapshot", "ACTIONS", "snapshot_of", "write_snapshot"]

ACTIONS = ("alloc", "free", "free_requested", "free_completed", "segment_alloc", "segment_free")
_FIELDS = ("action", "addr", "size", "stream", "category", "frame")


def _replay(rec: Recorder, events: Iterable[Any]) -> None:
    for i, e in enumerate(events):
        if isinstance(e, Mapping):
            unknown = set(e) - set(_FIELDS)
            if unknown:
                raise TypeError(f"events[{i}] = {e!r}: unknown fields {sorted(unknown)}; expected {list(_FIELDS)}")
            rec.record(e.get("action"), e.get("addr"), e.get("size"), e.get("stream", 0), e.get("category"),
                       e.get("frame"))
        elif isinstance(e, (tuple, list)) and 3 <= len(e) <= 5:
            # (action, addr, size[, category[, stream]])
            rec.record(e[0], e[1], e[2], e[4] if len(e) > 4 else 0, e[3] if len(e) > 3 else None)
        else:
            raise TypeError(f"events[{i}] = {e!r}; expected (action, addr, size[, category[, stream]]) or a dict "
                            f"with fields {list(_FIELDS)}")


def snapshot_of(events: Iterable[Any], *, device: int = 0, timestamps: bool = False,
                max_entries: int = 100_000, max_live: int = 1 << 15) -> Snapshot:
    """The snapshot after replaying ``events`` into a fresh recorder.

    Events are tuples ``(action, addr, size[, category[, stream]])`` or dicts with ``action,
    addr, size`` and optionally ``stream, category, frame`` (``(filename, function, line)``).
    Without ``timestamps`` every event gets the time recording started (the viewer orders by
    index).
    """
    rec = Recorder(max_entries, max_live, device, timestamps)
    rec.start()
    _replay(rec, events)
    return rec.snapshot()


def write_snapshot(path: str, events: Iterable[Any], labels: Optional[Mapping[str, Any]] = None,
                   **options: Any) -> Snapshot:
    """``snapshot_of(events)`` written as a memory_viz pickle to ``path``; returns the snapshot."""
    snap = snapshot_of(events, **options)
    snap.write(str(path), None if labels is None else {str(k): str(v) for k, v in labels.items()})
    return snap
