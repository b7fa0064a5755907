# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.profile.MemoryProfiler on CPU: file naming, step gating, atomic writes, the
OOM hook and the merge of PoolAllocator slots into a snapshot. torch's recorder needs CUDA, so the
profiler runs here over a backend that records what the profiler asks of it and returns a
snapshot laid out as torch's (the GPU machine runs torch's own, bench/megatron_fsdp_pool.py)."""
import gc
import os
import pickle
from pathlib import Path

import pytest
import torch

import headroom
from headroom.torch import megatron_fsdp as hm
from headroom.torch import profile as hp

from test_megatron_fsdp import cpu_groups, hybrid_groups

CPU = torch.device("cpu")


class RecordingBackend:
    """Stands where torch.cuda's recorder stands; the snapshot it returns puts every live
    PoolAllocator arena in a segment, as torch's caching allocator would."""

    def __init__(self):
        self.calls = []
        self.oom_observer = None
        self.trace = []

    def start(self, stacks, max_entries):
        self.calls.append(("start", stacks, max_entries))

    def stop(self):
        self.calls.append(("stop",))

    def attach_oom_observer(self, fn):
        self.oom_observer = fn

    def snapshot(self):
        self.calls.append(("snapshot",))
        segments = []
        for a in hm.allocators():
            if a.arena is None:
                continue
            base, n = a.arena.data_ptr(), a.arena.numel()
            rounded = -(-n // 512) * 512
            segments.append({
                "device": 0, "address": base - 1024, "total_size": 1024 + rounded + 4096, "stream": 0,
                "segment_type": "large", "allocated_size": 1024 + rounded, "active_size": 1024 + rounded,
                "requested_size": 1024 + n,
                "blocks": [
                    {"address": base - 1024, "size": 1024, "requested_size": 1000, "state": "active_allocated",
                     "frames": []},
                    {"address": base, "size": rounded, "requested_size": n, "state": "active_allocated", "frames": []},
                    {"address": base + rounded, "size": 4096, "requested_size": 0, "state": "inactive", "frames": []},
                ],
            })
        return {"segments": segments, "device_traces": [list(self.trace)], "allocator_settings": {}}


def test_files_are_named_by_step_rank_and_coordinates(tmp_path):
    prof = hp.MemoryProfiler(steps=[2], out_dir=tmp_path / "snaps", coords={"dp": 1, "pp": 0, "tp": 3, "cp": 1},
                             rank=5, backend=RecordingBackend())
    assert prof.snapshot_path(2) == tmp_path / "snaps" / "step_2.rank5.dp1.pp0.tp3.cp1.pickle"
    assert prof.snapshot_path(7, "oom_step").name == "oom_step_7.rank5.dp1.pp0.tp3.cp1.pickle"
    alone = hp.MemoryProfiler(steps=[0], out_dir=tmp_path, backend=RecordingBackend())
    assert alone.snapshot_path(0).name == "step_0.pickle"  # no distributed, no coordinates


def test_only_the_chosen_steps_record_and_write(tmp_path):
    backend = RecordingBackend()
    prof = hp.MemoryProfiler(steps=[1, 3], out_dir=tmp_path, coords={"pp": 1}, rank=0, stacks="all",
                             max_entries=500, backend=backend)
    written = []
    for step in range(5):
        with prof.step(step):
            backend.calls.append(("work", step))
        written.append(sorted(p.name for p in tmp_path.iterdir()))
    assert backend.calls == [
        ("work", 0),
        ("start", "all", 500), ("work", 1), ("snapshot",), ("stop",),
        ("work", 2),
        ("start", "all", 500), ("work", 3), ("snapshot",), ("stop",),
        ("work", 4),
    ]
    assert written[0] == [] and written[1] == ["step_1.rank0.pp1.pickle"]
    assert written[4] == ["step_1.rank0.pp1.pickle", "step_3.rank0.pp1.pickle"]
    snap = pickle.loads((tmp_path / "step_3.rank0.pp1.pickle").read_bytes())
    assert snap["headroom"]["step"] == 3 and snap["headroom"]["coords"] == {"rank": 0, "pp": 1}
    assert prof.written == [tmp_path / "step_1.rank0.pp1.pickle", tmp_path / "step_3.rank0.pp1.pickle"]


def test_other_ranks_do_not_record(tmp_path):
    backend = RecordingBackend()
    prof = hp.MemoryProfiler(steps=[0], out_dir=tmp_path, rank=3, ranks=[0, 1], backend=backend)
    with prof.step(0):
        pass
    assert backend.calls == [] and list(tmp_path.iterdir()) == []


def test_a_step_that_raises_still_stops_recording(tmp_path):
    backend = RecordingBackend()
    prof = hp.MemoryProfiler(steps=[0], out_dir=tmp_path, backend=backend)
    with pytest.raises(ZeroDivisionError):
        with prof.step(0):
            1 / 0
    assert backend.calls[-1] == ("stop",) and (tmp_path / "step_0.pickle").exists()


def test_writes_are_atomic(tmp_path, monkeypatch):
    backend = RecordingBackend()
    prof = hp.MemoryProfiler(steps=[0, 1], out_dir=tmp_path, backend=backend)
    seen = []
    real_replace = os.replace

    def checking_replace(src, dst):
        # at the rename the whole pickle is in the partial file and nothing is under the final name
        seen.append((Path(src).name, Path(dst).exists(), pickle.loads(Path(src).read_bytes())["headroom"]["step"]))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", checking_replace)
    with prof.step(0):
        pass
    assert seen == [("step_0.pickle.partial", False, 0)]
    monkeypatch.setattr(os, "replace", real_replace)
    # the final name is taken by a directory: an error naming the file, no partial file left,
    # recording stopped, and the profiler still usable
    (tmp_path / "step_1.pickle").mkdir()
    with pytest.raises(headroom.invalid_argument, match=r"cannot write snapshot '.*step_1\.pickle'"):
        with prof.step(1):
            pass
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())
    assert backend.calls[-1] == ("stop",)
    os.rmdir(tmp_path / "step_1.pickle")
    with prof.step(1):
        pass
    assert (tmp_path / "step_1.pickle").is_file()


def test_oom_observer_writes_a_snapshot(tmp_path):
    backend = RecordingBackend()
    prof = hp.MemoryProfiler(steps=[5], out_dir=tmp_path, on_oom=True, backend=backend)
    prof.begin_step(2)
    backend.oom_observer(0, 1 << 30, 0, 0)  # torch calls it with (device, alloc, device_alloc, device_free)
    assert (tmp_path / "oom_step_2.pickle").is_file()
    prof.end_step(2)
    assert not (tmp_path / "step_2.pickle").exists()


def test_bad_configuration_names_the_value(tmp_path):
    b = RecordingBackend()
    with pytest.raises(headroom.invalid_argument, match=r"steps is empty"):
        hp.MemoryProfiler(steps=[], out_dir=tmp_path, backend=b)
    with pytest.raises(headroom.invalid_argument, match=r"step -1"):
        hp.MemoryProfiler(steps=[-1], out_dir=tmp_path, backend=b)
    with pytest.raises(headroom.invalid_argument, match=r"coordinate name 'd.p'"):
        hp.MemoryProfiler(out_dir=tmp_path, coords={"d.p": 0}, backend=b)
    with pytest.raises(headroom.invalid_argument, match=r"coordinate tp=-2"):
        hp.MemoryProfiler(out_dir=tmp_path, coords={"tp": -2}, backend=b)
    with pytest.raises(headroom.invalid_argument, match=r"stacks='cpp'"):
        hp.MemoryProfiler(out_dir=tmp_path, stacks="cpp", backend=b)
    with pytest.raises(headroom.invalid_argument, match=r"max_entries=0"):
        hp.MemoryProfiler(out_dir=tmp_path, max_entries=0, backend=b)
    (tmp_path / "file").write_text("x")
    with pytest.raises(headroom.invalid_argument, match=r"output directory '.*file' is not a writable directory"):
        hp.MemoryProfiler(out_dir=tmp_path / "file", backend=b)
    prof = hp.MemoryProfiler(steps=[0], out_dir=tmp_path, backend=b)
    with pytest.raises(headroom.logic_error, match=r"end_step\(4\) without begin_step\(4\)"):
        prof.end_step(4)
    prof.begin_step(1)
    with pytest.raises(headroom.logic_error, match=r"begin_step\(2\) while step 1 is open"):
        prof.begin_step(2)
    with pytest.raises(headroom.logic_error, match=r"end_step\(3\) but the open step is 1"):
        prof.end_step(3)


def test_the_default_backend_needs_cuda_at_construction(tmp_path):
    if torch.cuda.is_available():
        hp.MemoryProfiler(steps=[0], out_dir=tmp_path / "snaps")
        assert (tmp_path / "snaps").is_dir()
        return
    with pytest.raises(headroom.cuda_error, match=r"MemoryProfiler: torch .* sees no CUDA device \(torch.cuda."
                                                  r"is_available\(\) is False\).*pass backend="):
        hp.MemoryProfiler(steps=[0], out_dir=tmp_path / "snaps")
    assert not (tmp_path / "snaps").exists()  # refused before anything was written


def test_pool_slots_are_merged_into_the_snapshot(tmp_path):
    gc.collect()  # allocators of earlier tests are gone: this one is the only arena
    a = hm.PoolAllocator("fsdp_params", cpu_groups(hybrid_groups()))
    for op, b, n in (("a", 1, 48), ("a", 2, 10), ("f", 1, 0), ("a", 4, 40), ("f", 2, 0), ("a", 6, 12), ("f", 4, 0),
                     ("f", 6, 0)):  # the learned step: the arena exists before the recorded one
        a.allocate(b, n, torch.bfloat16, CPU) if op == "a" else a.free(b)
    a.end_step()
    backend = RecordingBackend()
    base = a.arena.data_ptr()
    backend.trace = [
        {"action": "alloc", "addr": base, "size": a.arena.numel(), "stream": 0, "time_us": 1, "frames": []},
        {"action": "alloc", "addr": base - 1024, "size": 1000, "stream": 0, "time_us": 2, "frames": []},
    ]
    prof = hp.MemoryProfiler(steps=[0], out_dir=tmp_path, backend=backend)
    with prof.step(0):
        b1 = a.allocate(1, 48, torch.bfloat16, CPU)
        b2 = a.allocate(2, 10, torch.bfloat16, CPU)
        a.free(1)
        b4 = a.allocate(4, 40, torch.bfloat16, CPU)
    a.free(2)
    a.allocate(6, 12, torch.bfloat16, CPU)  # after the step: not in the file
    snap = pickle.loads((tmp_path / "step_0.pickle").read_bytes())
    (seg,) = snap["segments"]
    assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    cursor, active = seg["address"], []
    for blk in seg["blocks"]:
        assert blk["address"] == cursor  # torch's Block fields stay consistent
        if blk["state"] == "active_allocated":
            active.append((cursor, blk["size"], blk["frames"][0]["name"] if blk["frames"] else ""))
        cursor += blk["size"]
    held = sorted([(b4.data.data_ptr(), 80, f"fsdp_params unit 2 bucket 4 slot @{a.plan.offsets[4]}"),
                   (b2.data.data_ptr(), 20, f"fsdp_params unit 1 bucket 2 slot @{a.plan.offsets[2]}")])
    assert active == [(base - 1024, 1024, "")] + held
    trace = snap["device_traces"][0]
    assert [(t["action"], t["addr"], t["size"]) for t in trace] == [
        ("alloc", base - 1024, 1000),  # torch's own event kept; the arena's alloc dropped
        ("alloc", b1.data.data_ptr(), 96),
        ("alloc", b2.data.data_ptr(), 20),
        ("free_requested", b1.data.data_ptr(), 96),
        ("free_completed", b1.data.data_ptr(), 96),
        ("alloc", b4.data.data_ptr(), 80),
    ]
    assert snap["headroom"]["pools"][0]["arena_bytes"] == a.arena.numel()
    assert [h["addr"] for h in snap["headroom"]["pools"][0]["held"]] == [h[0] for h in held]  # by address
    # torch's own tooling reads the merged snapshot
    viz = pytest.importorskip("torch.cuda._memory_viz")
    assert "<html" in viz.trace_plot(snap).lower()
    assert "<html" in viz.segment_plot(snap).lower()
    assert len(viz.segsum(snap)) > 0
