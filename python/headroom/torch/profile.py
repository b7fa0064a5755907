# SPDX-License-Identifier: Apache-2.0
"""Step-gated memory snapshots for PyTorch jobs, one file per rank, with headroom's pool slots.

    prof = MemoryProfiler(steps=[3, 4], out_dir="snapshots", coords={"dp": dp, "pp": pp, "tp": tp, "cp": cp})
    for step in range(n):
        with prof.step(step):
            train_step()
    # snapshots/step_3.rank5.dp1.pp0.tp1.cp0.pickle, step_4....: open at https://pytorch.org/memory_viz

* Recording (``torch.cuda.memory._record_memory_history``) runs only inside the chosen steps, so
  other steps pay nothing; ``stacks="python"`` (default) keeps dumps cheap (torchtitan measured a
  461 s dump with C++ stacks against 4 s with Python ones), ``"all"`` adds C++ frames,
  ``None`` records no stacks. ``max_entries`` bounds the history.
* ``on_oom=True`` attaches torch's out-of-memory observer: an OOM writes
  ``oom_step_<n>.<coords>.pickle`` (with the history of the step if it was recorded).
* The default backend is torch.cuda's recorder: constructing a profiler on a machine where
  ``torch.cuda.is_available()`` is False raises ``headroom.cuda_error`` at once, before any file
  is written (pass ``backend=`` to record something else).
* Files are named by step and parallel coordinates, written to ``<name>.partial`` and renamed, so
  a crash never leaves half a snapshot under the final name; pickle protocol 4 (memory_viz's
  reader).
* headroom pool slots: every :class:`headroom.torch.megatron_fsdp.PoolAllocator` arena is one
  torch allocation; in the written snapshot that block is replaced by the slots held at dump
  time (the rest of the arena shows as free), and each slot lease and release of the step is a
  trace event at the slot's address with a frame naming the allocator, unit, bucket and slot. So
  the viewer draws the arena by unit instead of one opaque block, without counting it twice.
"""
from __future__ import annotations

import bisect
import contextlib
import inspect
import os
import pickle
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional

import torch

import headroom

__all__ = ["MemoryProfiler", "TorchCudaBackend", "merge_pool_events", "write_atomically"]

_STACKS = ("python", "all", None)


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` to ``path`` via ``<path>.partial`` + fsync + rename: readers see the whole file or none."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise headroom.invalid_argument(
            f"MemoryProfiler: cannot write snapshot {str(path)!r}: {e.strerror or e}"
        ) from e


class TorchCudaBackend:
    """torch.cuda's recorder, snapshot and OOM observer (private APIs, feature-detected)."""

    def __init__(self, device=None):
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise headroom.cuda_error(
                f"MemoryProfiler: torch {torch.__version__} ({build}) sees no CUDA device "
                "(torch.cuda.is_available() is False), and the default backend records torch.cuda's allocator; run "
                "on a machine with a GPU, or pass backend= (an object with start, stop, snapshot and "
                "attach_oom_observer)"
            )
        self.device = device

    def start(self, stacks: Optional[str], max_entries: int) -> None:
        record = torch.cuda.memory._record_memory_history
        accepted = inspect.signature(record).parameters
        kwargs = {"enabled": "all", "context": "all" if stacks else None, "stacks": stacks or "python",
                  "max_entries": max_entries}
        if "device" in accepted and self.device is not None:
            kwargs["device"] = self.device
        if "clear_history" in accepted:
            kwargs["clear_history"] = True  # each recorded step starts from an empty history
        record(**{k: v for k, v in kwargs.items() if k in accepted})

    def stop(self) -> None:
        torch.cuda.memory._record_memory_history(enabled=None)

    def snapshot(self) -> Dict[str, Any]:
        return torch.cuda.memory._snapshot()

    def attach_oom_observer(self, fn) -> None:
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            raise headroom.invalid_argument(
                f"MemoryProfiler(on_oom=True): torch {torch.__version__} has no out-of-memory observer "
                "(torch._C._cuda_attach_out_of_memory_observer); pass on_oom=False"
            )
        attach(fn)


def _check_axis(name: str, value: Any) -> None:
    if not isinstance(name, str) or not name or any(c in name for c in "./\\ "):
        raise headroom.invalid_argument(
            f"MemoryProfiler: coordinate name {name!r}; expected a non-empty name without '.', '/', '\\' or spaces"
        )
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise headroom.invalid_argument(f"MemoryProfiler: coordinate {name}={value!r}; expected an int >= 0")


class MemoryProfiler:
    """Records PyTorch's allocator history on the chosen ``steps`` and writes one snapshot per rank.

    ``coords``: parallel coordinates for the file name (``{"dp": 0, "pp": 1, ...}``; the rank is
    added first when torch.distributed is initialised). ``ranks``: only these (global) ranks
    record (default all). ``backend``: what records and snapshots (default torch.cuda's).
    """

    def __init__(
        self,
        steps: Iterable[int] = (0, 1),
        out_dir: os.PathLike = "memory_snapshots",
        coords: Optional[Mapping[str, int]] = None,
        *,
        stacks: Optional[str] = "python",
        max_entries: int = 100_000,
        on_oom: bool = False,
        ranks: Optional[Iterable[int]] = None,
        rank: Optional[int] = None,
        pool_events: bool = True,
        backend: Any = None,
    ):
        steps = sorted(set(steps))
        if not steps:
            raise headroom.invalid_argument("MemoryProfiler: steps is empty; expected the steps to record, e.g. [0, 1]")
        for s in steps:
            if not isinstance(s, int) or isinstance(s, bool) or s < 0:
                raise headroom.invalid_argument(f"MemoryProfiler: step {s!r}; expected ints >= 0")
        if stacks not in _STACKS:
            raise headroom.invalid_argument(f"MemoryProfiler: stacks={stacks!r}; expected 'python', 'all' or None")
        if not isinstance(max_entries, int) or max_entries <= 0:
            raise headroom.invalid_argument(f"MemoryProfiler: max_entries={max_entries!r}; expected an int > 0")
        dist = torch.distributed
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else None
        self.coords: Dict[str, int] = {}
        if rank is not None:
            self.coords["rank"] = rank
        for k, v in (coords or {}).items():
            _check_axis(k, v)
            self.coords[k] = v
        self.rank = rank
        self.steps = steps
        self.stacks = stacks
        self.max_entries = max_entries
        self.active = ranks is None or (rank or 0) in set(ranks)
        self.backend = backend if backend is not None else TorchCudaBackend()  # checks for CUDA, before any file
        self.out_dir = Path(out_dir)
        self._probe_out_dir()
        self.pool_events = pool_events
        self.written: List[Path] = []
        self._step: Optional[int] = None
        self._recording = False
        self._events: List[Dict[str, Any]] = []
        if on_oom and self.active:
            self.backend.attach_oom_observer(self._on_oom)

    def _probe_out_dir(self) -> None:
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            probe = self.out_dir / f".probe.{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise headroom.invalid_argument(
                f"MemoryProfiler: output directory {str(self.out_dir)!r} is not a writable directory: "
                f"{e.strerror or e}"
            ) from e

    # -- naming -------------------------------------------------------------------------------

    def snapshot_path(self, step: int, prefix: str = "step") -> Path:
        """``<out_dir>/<prefix>_<step>.<axis><index>....pickle``."""
        parts = [f"{prefix}_{step}"] + [f"{k}{v}" for k, v in self.coords.items()]
        return self.out_dir / (".".join(parts) + ".pickle")

    # -- gating -------------------------------------------------------------------------------

    def begin_step(self, step: int) -> None:
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise headroom.invalid_argument(f"MemoryProfiler.begin_step: step {step!r}; expected an int >= 0")
        if self._step is not None:
            raise headroom.logic_error(
                f"MemoryProfiler.begin_step({step}) while step {self._step} is open; call end_step({self._step}) first"
            )
        self._step = step
        if self.active and step in self.steps:
            self._events = []
            if self.pool_events:
                from . import megatron_fsdp

                megatron_fsdp.add_lease_listener(self._on_lease)
            self.backend.start(self.stacks, self.max_entries)
            self._recording = True

    def end_step(self, step: int) -> Optional[Path]:
        """Closes ``step``; on a recorded step writes the snapshot and returns its path."""
        if self._step is None or step != self._step:
            raise headroom.logic_error(
                f"MemoryProfiler.end_step({step}) but the open step is {self._step}; expected end_step({self._step})"
                if self._step is not None else f"MemoryProfiler.end_step({step}) without begin_step({step})"
            )
        self._step = None
        if not self._recording:
            return None
        try:
            path = self._dump(step, "step")
        finally:
            self._stop()
        return path

    @contextlib.contextmanager
    def step(self, step: int):
        """``with prof.step(n): ...``: begin_step / end_step around the block (also on errors)."""
        self.begin_step(step)
        try:
            yield self
        finally:
            self.end_step(step)

    def _stop(self) -> None:
        if self._recording:
            self._recording = False
            from . import megatron_fsdp

            megatron_fsdp.remove_lease_listener(self._on_lease)
            self.backend.stop()

    def close(self) -> None:
        self._stop()
        self._step = None

    # -- events and dumps ---------------------------------------------------------------------

    def _on_lease(self, event: Dict[str, Any]) -> None:
        event = dict(event)
        event["time_us"] = time.time_ns() // 1000
        self._events.append(event)

    def _on_oom(self, device, alloc, device_alloc, device_free) -> None:  # torch's observer signature
        try:
            self._dump(self._step if self._step is not None else 0, "oom_step")
        except Exception:  # noqa: BLE001 - never mask the OOM itself
            pass

    def _dump(self, step: int, prefix: str) -> Path:
        snap = self.backend.snapshot()
        from . import megatron_fsdp

        snap = merge_pool_events(snap, self._events, megatron_fsdp.allocators())
        snap.setdefault("headroom", {}).update({"step": step, "coords": dict(self.coords)})
        path = self.snapshot_path(step, prefix)
        write_atomically(path, pickle.dumps(snap, protocol=4))
        self.written.append(path)
        return path


def _frame(e: Mapping[str, Any]) -> Dict[str, Any]:
    return {
        "filename": "headroom/pool",
        "line": int(e["bucket"]),
        "name": f"{e['allocator']} unit {e['unit']} bucket {e['bucket']} slot {e['slot']}",
    }


def merge_pool_events(snapshot: Dict[str, Any], events: List[Mapping[str, Any]], allocators: Iterable[Any]) -> Dict[str, Any]:
    """A copy of torch's ``snapshot`` with every PoolAllocator arena shown as its slots.

    In ``segments`` the arena's block is replaced by the slots held now (``active_allocated``)
    and free gaps (``inactive``), block sizes still summing to the segment; in ``device_traces``
    the arena's own alloc / free entries are dropped and the slot leases (``events``, from
    :func:`headroom.torch.megatron_fsdp.add_lease_listener`) inserted in time order as
    ``alloc`` / ``free_requested`` + ``free_completed`` at the slot addresses."""
    snap = dict(snapshot)
    snap["segments"] = [dict(s, blocks=[dict(b) for b in s.get("blocks", [])]) for s in snapshot.get("segments", [])]
    traces = [list(t) for t in snapshot.get("device_traces", [])]
    arenas = []
    for a in allocators:
        if getattr(a, "arena", None) is None or a.arena.numel() == 0:
            continue
        arenas.append(a)
    info = []
    for a in arenas:
        base, nbytes = a.arena.data_ptr(), a.arena.numel()
        held = sorted(a.leases(), key=lambda x: x["addr"])
        device = a.arena.device.index if a.arena.device.type == "cuda" else 0
        info.append({"allocator": a.name, "planner": a.planner, "arena_addr": base, "arena_bytes": nbytes,
                     "held": [{k: h[k] for k in ("bucket", "unit", "addr", "size", "slot")} for h in held]})
        for seg in snap["segments"]:
            addr = seg.get("address", 0)
            if not (addr <= base < addr + seg.get("total_size", 0)):
                continue
            blocks, cursor, out = seg["blocks"], addr, []
            for blk in blocks:
                start = blk.get("address", cursor)
                cursor = start + blk["size"]
                if start != base:
                    out.append(blk)
                    continue
                pos = base
                for h in held:  # torch's Block fields, address included
                    if h["addr"] > pos:
                        out.append({"address": pos, "size": h["addr"] - pos, "requested_size": 0,
                                    "state": "inactive", "frames": []})
                    out.append({"address": h["addr"], "size": h["size"], "requested_size": h["size"],
                                "state": "active_allocated", "frames": [_frame(h)]})
                    pos = h["addr"] + h["size"]
                if start + blk["size"] > pos:
                    out.append({"address": pos, "size": start + blk["size"] - pos, "requested_size": 0,
                                "state": "inactive", "frames": []})
            seg["blocks"] = out
            seg["active_size"] = sum(b["size"] for b in out if b["state"].startswith("active"))
            seg["allocated_size"] = sum(b["size"] for b in out if b["state"] == "active_allocated")
        while len(traces) <= device:
            traces.append([])
        trace = [t for t in traces[device] if not (t.get("addr") == base and t.get("action") in
                                                    ("alloc", "free_requested", "free_completed"))]
        ours = []
        for e in events:
            if e.get("arena_addr") != base:
                continue
            common = {"addr": e["addr"], "size": e["size"], "stream": 0, "time_us": e.get("time_us", 0),
                      "frames": [_frame(e)]}
            if e["action"] == "alloc":
                ours.append(dict(common, action="alloc"))
            else:
                ours.append(dict(common, action="free_requested"))
                ours.append(dict(common, action="free_completed"))
        if ours:
            if all("time_us" in t for t in trace):
                times = [t["time_us"] for t in trace]
                merged = list(trace)
                for o in ours:  # after every torch event of the same time: stable
                    i = bisect.bisect_right(times, o["time_us"])
                    merged.insert(i, o)
                    times.insert(i, o["time_us"])
                trace = merged
            else:
                trace = trace + ours
        traces[device] = trace
    snap["device_traces"] = traces
    snap.setdefault("headroom", {})["pools"] = info
    return snap
