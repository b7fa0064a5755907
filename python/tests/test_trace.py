# SPDX-License-Identifier: Apache-2.0
import pickle
import time

import pytest

import headroom
from headroom import trace

EVENTS = [
    {"action": "segment_alloc", "addr": 0x10000, "size": 8192, "category": "pool"},
    {"action": "alloc", "addr": 0x10000, "size": 1024, "category": "activation", "frame": ("model.py", "forward", 12)},
    ("alloc", 0x10400, 2048, "activation"),
    ("alloc", 0x90000, 512, "workspace", 7),  # outside every segment: gets a segment of its own
    ("free_requested", 0x10400, 2048),
    ("free_completed", 0x10400, 2048),
]


def test_snapshot_of_an_event_list():
    s = trace.snapshot_of(EVENTS)
    assert (s.reserved_bytes, s.active_bytes) == (8192 + 512, 1024 + 512)
    seg = s.segments[0]
    assert [(b["address"], b["size"], b["state"]) for b in seg["blocks"]] == [
        (0x10000, 1024, "active_allocated"), (0x10400, 8192 - 1024, "inactive")]
    assert seg["blocks"][0]["frames"] == [{"filename": "model.py", "name": "forward", "line": 12}]
    assert s.segments[1]["address"] == 0x90000 and s.segments[1]["stream"] == 7
    actions = [e["action"] for e in s.trace]
    assert actions == ["segment_alloc", "alloc", "alloc", "segment_alloc", "alloc", "free_requested",
                       "free_completed"]
    assert s.trace[5]["category"] == "activation"  # a free without a category takes its block's
    # free_requested earlier than free_completed: a deferred free, kept as two events
    assert [e["deferred"] for e in s.trace[5:]] == [False, True]
    assert not any(e["synthetic"] for e in s.trace)
    # without timestamps every event has the time recording started, in Unix-epoch microseconds
    assert len({e["time_us"] for e in s.trace}) == 1 and abs(s.trace[0]["time_us"] / 1e6 - time.time()) < 60


def test_an_ordinary_free_is_written_as_the_pair_pytorch_writes():
    s = trace.snapshot_of([("alloc", 0x100, 64, "x"), ("free", 0x100, 64), ("alloc", 0x200, 32, "y"),
                           ("free_requested", 0x200, 32)])
    frees = [(e["action"], e["addr"], e["category"], e["deferred"]) for e in s.trace if e["action"].startswith("free")]
    assert frees == [("free_requested", 0x100, "x", False), ("free_completed", 0x100, "x", False),
                     ("free_requested", 0x200, "y", False)]
    assert s.active_bytes == 32 and [b["state"] for seg in s.segments for b in seg["blocks"]] == ["active_pending_free"]
    events = pickle.loads(s.to_memory_viz())["device_traces"][0]
    assert [e["action"] for e in events if e["addr"] == 0x100] == ["segment_alloc", "alloc", "free_requested",
                                                                   "free_completed", "segment_free"]


def test_times_are_unix_epoch_microseconds():
    rec = trace.Recorder(timestamps=True)
    before = time.time_ns() // 1000
    rec.start()
    for i in range(1, 5):
        rec.record("alloc", 0x1000 * i, 64)
        rec.record("free", 0x1000 * i, 64)
    after = time.time_ns() // 1000
    s = rec.snapshot()
    times = [e["time_us"] for e in s.trace]
    assert times == sorted(times)
    # the tick rate is calibrated against the clocks: allow a few milliseconds of error
    assert before - 5000 <= times[0] and times[-1] <= after + 5000
    assert [e["time_us"] for e in pickle.loads(s.to_memory_viz())["device_traces"][0]] == times


def test_blocks_live_before_start_get_a_synthetic_alloc():
    rec = trace.Recorder()
    rec.record("segment_alloc", 0x10000, 4096, category="pool")
    rec.record("alloc", 0x10000, 1024, category="weights", frame=("model.py", "init", 3))
    rec.record("alloc", 0x10400, 512, category="activation")
    rec.start()
    rec.record("free", 0x10400, 512)
    s = rec.snapshot()
    assert s.synthetic == 2
    head = [(e["action"], e["addr"], e["category"], e["synthetic"]) for e in s.trace[:3]]
    assert head == [("segment_alloc", 0x10000, "pool", True), ("alloc", 0x10000, "weights", True),
                    ("alloc", 0x10400, "activation", True)]
    assert s.trace[1]["frames"] == [{"filename": "model.py", "name": "init", "line": 3}]
    assert [e["synthetic"] for e in s.trace[3:]] == [False, False]
    assert pickle.loads(s.to_memory_viz())["headroom"]["synthetic_allocs"] == 2


def test_allocator_settings_say_whether_the_ring_overflowed():
    rec = trace.Recorder(max_entries=3)
    rec.start()
    for i in range(1, 3):
        rec.record("alloc", 0x100 * i, 8)
    s = rec.snapshot()
    assert s.allocator_settings == {"trace_alloc_max_entries": 3, "trace_alloc_overflowed": False}
    rec.record("alloc", 0x300, 8)
    rec.record("alloc", 0x400, 8)
    s = rec.snapshot()
    assert s.dropped == 1 and s.allocator_settings == {"trace_alloc_max_entries": 3, "trace_alloc_overflowed": True}
    assert pickle.loads(s.to_memory_viz())["allocator_settings"] == s.allocator_settings


def test_the_pickle_reads_back_as_memory_viz_data(tmp_path):
    path = tmp_path / "snap.pickle"
    snap = trace.write_snapshot(path, EVENTS, labels={"step": 3, "rank": "pp0"})
    with open(path, "rb") as f:
        data = pickle.load(f)
    assert data == pickle.loads(snap.to_memory_viz({"step": "3", "rank": "pp0"}))
    assert set(data) == {"segments", "device_traces", "allocator_settings", "headroom"}
    assert data["headroom"]["step"] == "3" and data["headroom"]["dropped_events"] == 0
    seg = data["segments"][0]
    assert (seg["address"], seg["total_size"], seg["active_size"]) == (0x10000, 8192, 1024)
    assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    events = data["device_traces"][0]
    assert [e["action"] for e in events][:3] == ["segment_alloc", "alloc", "alloc"]
    assert events[1]["frames"] == [{"filename": "model.py", "line": 12, "name": "forward"}]
    assert not (tmp_path / "snap.pickle.partial").exists()


def test_device_index_places_the_trace():
    data = pickle.loads(trace.snapshot_of(EVENTS, device=2).to_memory_viz())
    assert [len(t) > 0 for t in data["device_traces"]] == [False, False, True]
    assert all(s["device"] == 2 for s in data["segments"])


def test_recorder_follows_start_and_stop():
    rec = trace.Recorder(timestamps=True)
    rec.record("alloc", 0x100, 64)  # not recording: tracked live, not in the trace
    rec.start()
    rec.record("alloc", 0x200, 32, category="x")
    rec.stop()
    assert not rec.recording
    s = rec.snapshot()
    assert s.active_bytes == 96
    # the block allocated before start() gets a synthetic alloc at the start of the trace
    assert [(e["addr"], e["synthetic"]) for e in s.trace if e["action"] == "alloc"] == [(0x100, True), (0x200, False)]
    small = trace.Recorder(max_entries=2)
    small.start()
    for i in range(5):
        small.record("alloc", 0x1000 * (i + 1), 8)
    assert small.dropped == 3 and small.snapshot().dropped == 3


def test_svg():
    svg = trace.snapshot_of(EVENTS).to_svg("step 3")
    assert svg.startswith("<svg") and "step 3" in svg and "activation" in svg


def test_torch_memory_viz_accepts_the_snapshot():
    mv = pytest.importorskip("torch.cuda._memory_viz", reason="torch is not installed: memory_viz cannot be run")
    data = pickle.loads(trace.snapshot_of(EVENTS).to_memory_viz())
    for plot in (mv.trace_plot, mv.segment_plot):
        html = plot(data)
        assert html.lstrip().startswith("<!DOCTYPE html>")
    summary = mv.segsum(data)
    assert "segments: 2" in summary and "total_reserved: 8.5KiB" in summary
    assert "total_allocated: 1.5KiB" in summary
    assert "TOTAL MEM" in mv.trace(data)


@pytest.mark.parametrize("call, error, message", [
    (lambda: trace.snapshot_of([("malloc", 0x10, 4)]), headroom.invalid_argument,
     "action = 'malloc'; expected one of .*'free'"),
    (lambda: trace.snapshot_of([("alloc", -16, 4)]), headroom.invalid_argument, "addr = -16"),
    (lambda: trace.snapshot_of([("alloc", 0, 4)]), headroom.invalid_argument, "addr = 0; expected the block's"),
    (lambda: trace.snapshot_of([("alloc", 16, 4.5)]), TypeError, r"size = 4.5 \(float\)"),
    (lambda: trace.snapshot_of([("alloc", 16, 4, 3)]), TypeError, "category = 3; expected a str"),
    (lambda: trace.snapshot_of([{"action": "alloc", "addr": 16, "size": 4, "frame": ("f", 1)}]), TypeError,
     r"expected a \(filename, function, line\) tuple"),
    (lambda: trace.snapshot_of([{"action": "alloc", "addr": 16, "size": 4, "frame": ("f", "g", 0)}]),
     headroom.invalid_argument, "frame line = 0"),
    (lambda: trace.snapshot_of([{"action": "alloc", "adr": 16}]), TypeError, r"unknown fields \['adr'\]"),
    (lambda: trace.snapshot_of(["alloc"]), TypeError, r"events\[0\] = 'alloc'"),
    (lambda: trace.snapshot_of([], device=-1), headroom.invalid_argument, "device -1 is negative"),
    (lambda: trace.Recorder(max_entries=0), headroom.invalid_argument, "max_entries is 0"),
    (lambda: trace.snapshot_of(EVENTS).write("/nonexistent-dir/x.pickle"), headroom.invalid_argument,
     "cannot create '/nonexistent-dir/x.pickle.partial'"),
    (lambda: trace.snapshot_of(EVENTS).to_memory_viz(["step"]), TypeError, "labels = \\['step'\\]"),
])
def test_bad_input_names_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_clear_events_and_counters():
    rec = trace.Recorder(max_live=2)
    rec.start()
    rec.record("alloc", 0x100, 8)
    rec.record("alloc", 0x200, 8)
    rec.record("alloc", 0x300, 8)  # no room in the live table
    rec.record("free", 0x300, 8)  # an untracked block's events are left out of the trace
    assert rec.untracked == 1 and rec.live == 2
    s = rec.snapshot()
    assert s.untracked == 1 and s.overlapping == 0 and s.device == 0
    assert [e["addr"] for e in s.trace if e["action"] == "alloc"] == [0x100, 0x200]
    assert 0x300 not in {e["addr"] for e in s.trace}
    assert pickle.loads(s.to_memory_viz())["headroom"]["untracked_blocks"] == 1
    assert "1 blocks left out" in s.to_svg()
    rec.clear_events()
    after = rec.snapshot()  # only the blocks live now, as synthetic allocs
    assert after.synthetic == 2 and all(e["synthetic"] for e in after.trace)
    assert [e["action"] for e in after.trace if e["action"] == "alloc"] == ["alloc", "alloc"]
