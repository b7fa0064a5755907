# SPDX-License-Identifier: Apache-2.0
"""The 2-GPU benchmarks' spawn / compare / report logic on CPU: bench/cp_torch_gather_nccl.py
and bench/stats_reduce_torch.py (--checks-only, and its timings on CPU tensors) on the gloo
backend (two processes), so that the NCCL runs on the GPU machine fail only for GPU reasons."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")

BENCH = Path(__file__).resolve().parents[3] / "bench"


def run(args, tmp_path):
    env = {**__import__("os").environ, "OUT": str(tmp_path)}
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=600, env=env)


def test_cp_gather_bench_on_gloo(tmp_path):
    out = run([BENCH / "cp_torch_gather_nccl.py", "--backend", "gloo", "--device", "cpu", "--tokens", "300",
               "--width", "16", "--extra-widths", "40", "--check-tokens", "300", "--check-width", "16", "--batches", "2",
               "--iterations", "3", "--warmup", "1", "--host-calls", "20"], tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "FAIL" not in out.stdout
    for policy in ("full", "none", "per_token", "local-gradient"):
        assert f"PASS  {policy} bf16 batch 1" in out.stdout and f"PASS  {policy} fp32 batch 0" in out.stdout
    summary = json.loads((tmp_path / "cp_torch_gather_nccl.json").read_text())
    # 7 checks per checked batch; each timed case (bf16, fp32, bf16 at the extra width) checks 3 methods
    assert summary["pass"] and summary["checks_failed"] == 0 and summary["checks"] == 2 * 2 * 7 + 3 * 3
    assert [(r["dtype"], r["width"]) for r in summary["rows"]] == [("bf16", 16), ("fp32", 16), ("bf16", 40)]
    assert set(summary["rows"][0]["methods_ms"]) == {"auto", "all_gather", "pipelined", "in_place"}
    # the per-token host cost of the first case, and rank 0's profile of it, name the collective
    first = summary["rows"][0]
    assert set(first["per_token_host_us"]) == {"cp.gather", "all_gather"}
    assert all(v > 0 for v in first["per_token_host_us"].values())
    assert any("all_gather" in row[0] for row in first["per_token_profile"]["cp.gather"])
    assert "rank 0 cProfile of cp.gather" in out.stdout
    # the device timeline is CUDA's (torch.profiler's kernel records): on the CPU, named and empty
    assert first["device_timeline_us"] == dict.fromkeys(
        ("auto", "pipelined", "all_gather", "per-token cp.gather", "per-token all_gather"))


def test_cp_gather_bench_timeline_arithmetic():
    """The grouping the GPU run's device timeline rests on: calls split at idle gaps, the NCCL kernel
    found in each, the kernel time before and after it; a group without one NCCL kernel left out."""
    sys.path.insert(0, str(BENCH))
    try:
        from cp_torch_gather_nccl import timeline_of
    finally:
        sys.path.remove(str(BENCH))
    calls = [[(0, 10, "place"), (5, 105, "ncclDevKernel_AllGather"), (106, 140, "place")],
             [(1000, 1012, "place"), (1004, 1100, "ncclDevKernel_AllGather"), (1101, 1131, "place")],
             [(2000, 2010, "place"), (2002, 2104, "ncclDevKernel_AllGather"), (2105, 2145, "place")],
             [(3000, 3050, "copy_only")]]  # no collective: not a call of the gather
    t = timeline_of([k for c in calls for k in c])
    assert t == {"span": 140, "collective": 100, "before": 4, "after": 35, "kernels": 3}
    assert timeline_of([(0, 10, "place")]) is None
    # kernels closer than the gap are one call: two NCCL kernels in one group, left out
    assert timeline_of([(0, 100, "ncclA"), (150, 250, "ncclB")]) is None


def test_stats_bench_checks_on_gloo(tmp_path):
    out = run([BENCH / "stats_reduce_torch.py", "--backend", "gloo", "--checks-only"], tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "FAIL" not in text
    assert "PASS  exact max beyond 2^53" in text
    assert "PASS  extra key on rank 1, first call: collective_mismatch on every rank" in text
    assert "PASS  key renamed on rank 1 after agreement: collective_mismatch on every rank" in text
    line = [ln for ln in text.splitlines() if ln.startswith("{")][-1]
    assert all(c["pass"] for c in json.loads(line)["headroom_checks"])


def test_stats_bench_timings_on_gloo(tmp_path):
    out = run([BENCH / "stats_reduce_torch.py", "--backend", "gloo", "--device", "cpu", "--iterations", "20",
               "--warmup", "2", "--round", "5"], tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "FAIL" not in out.stdout and "headroom/pr3645" in out.stdout
    summary = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    assert summary["backend"] == "gloo" and [r["keys"] for r in summary["results"]] == [8, 64, 512]
    assert all(r["headroom_wall_us"] > 0 and r["pr3645_wall_us"] > 0 for r in summary["results"])
    assert all(c["pass"] for c in summary["headroom_checks"])
