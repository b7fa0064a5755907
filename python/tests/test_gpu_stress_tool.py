# SPDX-License-Identifier: Apache-2.0
"""tools/gpu-stress's logic on the CPU: which targets it finds (a bench's `stress as` lines replace
its whole run), which may run in lanes, how a run is judged, and a run's placeholders ({port}: a
free port, {dir}: a scratch folder of the run's own, gone with a passing run)."""
import importlib.util
import json
import sys
import time
import types
from importlib.machinery import SourceFileLoader
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tool():
    loader = SourceFileLoader("gpu_stress", str(ROOT / "tools/gpu-stress"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("gpu_stress", loader))
    loader.exec_module(module)
    return module


def test_variants_replace_the_whole_run():
    m = tool()
    found = dict(m.targets(control=True))
    nemotronh = "bench/megatron_fsdp_pool_nemotronh.py"
    assert nemotronh not in found  # its whole run (12 process groups) is not a stress target
    for planner in ("interval", "max", "by_bytes"):
        cmd = found[f"{nemotronh}:{planner}"]
        assert cmd[1:4] == [nemotronh, "--child", planner] and "{port}" in cmd and "{dir}/r.json" in cmd
        assert m.lanes_for(f"{nemotronh}:{planner}", 3) == 3  # the file opts in
    assert "bench/cp_torch_gather_nccl.py" in found and m.lanes_for("bench/cp_torch_gather_nccl.py", 3) == 3
    assert m.lanes_for("bench/stats_reduce_torch.py", 4) == 1  # latency-bound: one at a time
    assert found["tools/gpu-stress-control.py"][-1].endswith("gpu-stress-control.py")


def test_verdicts():
    m = tool()
    assert m.classify(0, "", False) == "pass"
    assert m.classify(77, "skipped: no GPU", False) == "skip"
    assert m.classify(0, "SKIP megatron_fsdp is not importable\n", False) == "skip"  # exits 0 (megatron benches)
    assert m.classify(0, "log line\nskipped: needs 2 GPUs\n", False) == "skip"
    assert m.classify(1, "FAIL", False) == "fail"
    assert m.classify(-11, "", False) == "crash"
    assert m.classify(1, "process 1 terminated with signal SIGSEGV", False) == "crash"
    assert m.classify(0, "Fatal Python error: Segmentation fault", False) == "crash"
    assert m.classify(0, "", True) == "hang"


def test_placeholders_per_run(tmp_path):
    m = tool()
    args = types.SimpleNamespace(timeout=60, lanes=1, deadline=0, started=0)
    code = ("import sys, pathlib; port, d = int(sys.argv[1]), pathlib.Path(sys.argv[2]); "
            "assert 1024 <= port < 65536 and d.is_dir(), (port, d); (d / 'x').write_text('y'); "
            "sys.exit(int(sys.argv[3]))")
    cores = tmp_path / "cores"
    cores.mkdir()
    verdict, note = m.run_once("t:ok", [sys.executable, "-c", code, "{port}", "{dir}", "0"], 0, args, tmp_path, cores)
    assert (verdict, note) == ("pass", "")
    assert not (tmp_path / "t_ok" / "run-0").exists()  # a passing run keeps nothing
    verdict, note = m.run_once("t:bad", [sys.executable, "-c", code, "{port}", "{dir}", "3"], 1, args, tmp_path, cores)
    assert verdict == "fail" and note.startswith("exit 3")
    kept = tmp_path / "t_bad" / "run-1"
    assert (kept / "scratch" / "x").read_text() == "y" and (kept / "notes.txt").exists()


def test_every_run_writes_its_out_to_a_folder_of_its_own(tmp_path):
    # Benches write their JSON and plots to $OUT: under lanes two runs of one bench would
    # write the same files. Each run's $OUT is its scratch folder ({dir}), kept with a failed run.
    m = tool()
    args = types.SimpleNamespace(timeout=60, lanes=1, deadline=0, started=0)
    cores = tmp_path / "cores"
    cores.mkdir()
    code = ("import os, sys, pathlib; out = pathlib.Path(os.environ['OUT']); "
            "assert out.is_dir() and out.name == 'scratch' and out.parent.name == 'run-' + sys.argv[1], out; "
            "(out / 'result.json').write_text(sys.argv[1]); sys.exit(int(sys.argv[1]))")
    assert m.run_once("t:out", [sys.executable, "-c", code, "0"], 0, args, tmp_path, cores) == ("pass", "")
    assert not (tmp_path / "t_out" / "run-0").exists()
    verdict, _ = m.run_once("t:out", [sys.executable, "-c", code, "2"], 2, args, tmp_path, cores)
    assert verdict == "fail" and (tmp_path / "t_out" / "run-2" / "scratch" / "result.json").read_text() == "2"


def test_deadline_leaves_runs_unrun(tmp_path):
    m = tool()
    args = types.SimpleNamespace(timeout=60, lanes=1, deadline=5, started=0)  # began long ago
    assert m.run_once("t", [sys.executable, "-c", "raise SystemExit(1)"], 0, args, tmp_path, tmp_path) == ("unrun", "")
    assert not (tmp_path / "t").exists()


def test_ports_are_outside_the_ephemeral_range_and_one_run_each():
    # A port from bind(0) may be taken by another lane's outgoing connection before the run
    # listens on it (EADDRINUSE in init_process_group, 2x H200, 2026-11-29).
    m = tool()
    lo, hi = m.ephemeral_ports()
    assert 0 < lo <= hi
    held = [m.free_port() for _ in range(16)]
    try:
        assert len(set(held)) == len(held)  # no two live runs share one
        assert all(1024 <= p < lo or p > hi for p in held), (held, lo, hi)
        assert all(m.port_is_free(p) for p in held)  # handed out, not bound: the run binds it
        assert held == sorted(held) or held[0] > held[-1]  # the cursor moves on (wrapping at most once)
    finally:
        for p in held:
            m.release_port(p)
    assert not m.PORTS_HELD
    again = m.free_port()
    m.release_port(again)
    assert again not in held[:8]  # a released port is not handed out again at once (TIME_WAIT)


def test_a_run_releases_its_port(tmp_path):
    m = tool()
    args = types.SimpleNamespace(timeout=60, lanes=1, deadline=0, started=0)
    cores = tmp_path / "cores"
    cores.mkdir()
    code = "import sys; sys.exit(0)"
    assert m.run_once("t:p", [sys.executable, "-c", code, "{port}"], 0, args, tmp_path, cores) == ("pass", "")
    assert not m.PORTS_HELD
    code = "import sys; sys.exit(5)"
    assert m.run_once("t:q", [sys.executable, "-c", code, "{port}"], 1, args, tmp_path, cores)[0] == "fail"
    assert not m.PORTS_HELD


def test_a_port_in_use_on_any_address_is_not_handed_out():
    import socket
    m = tool()
    taken = socket.socket()
    taken.bind(("", 0))  # the wildcard, as torch's store binds
    taken.listen()
    try:
        assert not m.port_is_free(taken.getsockname()[1])
    finally:
        taken.close()


def test_lanes_are_capped_by_the_memory_run_0_took():
    # 12 lanes of the NemotronH graph bench (up to 18 GiB per rank) overfilled a 140 GiB H200: 4 of
    # 37 runs failed with CUDA out of memory (2x H200, 2026-11-30).
    m = tool()
    base = [(600, 143771), (700, 143771)]
    lanes, note = m.lanes_by_memory(12, base, [600 + 18 * 1024, 700 + 17 * 1024])
    assert lanes == 6 and note.startswith("6 lanes, not 12: run 0 alone took 18.0 GiB"), note
    assert m.lanes_by_memory(4, base, [600 + 18 * 1024, 700])[0] == 4  # fits: as asked
    assert m.lanes_by_memory(8, base, [143000, 700])[0] == 1  # one run fills a GPU: one at a time
    assert m.lanes_by_memory(8, None, None) == (8, "8 lanes (GPU memory unknown: not capped)")
    assert m.lanes_by_memory(8, base, [600])[0] == 8  # a GPU count that changed: unknown
    assert m.lanes_by_memory(8, base, [600, 700])[0] == 8  # nothing rose


def test_the_sampler_keeps_each_gpus_peak(monkeypatch):
    m = tool()
    seen = iter([[(10, 100), (20, 100)], [(50, 100), (20, 100)], [(30, 100), (70, 100)]])
    monkeypatch.setattr(m, "gpu_memory", lambda: next(seen, [(15, 100), (25, 100)]))
    with m.MemorySampler(period=0.01) as mem:
        time.sleep(0.3)
    assert mem.base == [(10, 100), (20, 100)] and mem.peak == [50, 70]


def test_run_0_runs_alone_and_sets_the_lanes_of_the_rest(tmp_path, monkeypatch):
    m = tool()
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    code = ("import sys, time, pathlib; d = pathlib.Path(sys.argv[1]); t0 = time.time(); time.sleep(0.4); "
            "(d / str(time.time_ns())).write_text(f'{t0} {time.time()}')")
    monkeypatch.setattr(m, "targets", lambda control: [("bench/x.py:short", [sys.executable, "-c", code, str(stamps)])])
    monkeypatch.setattr(m, "lanes_for", lambda name, lanes: lanes)
    memory = iter([[(0, 100_000)] * 2])  # before run 0; then each sample: 40 GB on one GPU
    monkeypatch.setattr(m, "gpu_memory", lambda: next(memory, [(40_000, 100_000), (1_000, 100_000)]))
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.setattr(sys, "argv", ["gpu-stress", "5", "--lanes", "8", "--no-sanitize", "--timeout", "60"])
    assert m.main() == 0
    summary = json.loads((tmp_path / "out/stress/summary.json").read_text())
    got = summary["targets"]["bench/x.py:short"]
    assert got["pass"] == 5 and got["lanes"] == 2, got  # 80 % of 100 GB holds two 40 GB runs
    assert "lanes: 2 lanes, not 8: run 0 alone took 39.1 GiB" in " ".join(got["details"])
    spans = sorted(tuple(map(float, f.read_text().split())) for f in stamps.iterdir())
    assert len(spans) == 5 and all(spans[0][1] <= s[0] for s in spans[1:])  # the rest began after run 0 ended


def test_a_run_0_that_does_not_pass_leaves_the_rest_one_at_a_time(tmp_path, monkeypatch):
    # A run that failed early raised no memory: its "footprint" would let every lane in.
    m = tool()
    monkeypatch.setattr(m, "targets", lambda control: [("bench/x.py:bad", [sys.executable, "-c", "raise SystemExit(3)"])])
    monkeypatch.setattr(m, "lanes_for", lambda name, lanes: lanes)
    monkeypatch.setattr(m, "gpu_memory", lambda: [(0, 100_000)] * 2)
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.setattr(sys, "argv", ["gpu-stress", "3", "--lanes", "8", "--no-sanitize", "--timeout", "60"])
    assert m.main() == 1
    got = json.loads((tmp_path / "out/stress/summary.json").read_text())["targets"]["bench/x.py:bad"]
    assert got["fail"] == 3 and got["lanes"] == 1, got
    assert "lanes: 1 lane, not 8: run 0 did not pass (fail), its memory is not known" in got["details"]
