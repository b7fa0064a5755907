# SPDX-License-Identifier: Apache-2.0
"""bench/megatron_fsdp_pool.py --plan-only on CPU: the benchmark's model gives Megatron's
parameter groups the shape the GPU run relies on (heavy and light units), and the planners'
arenas order as expected (interval below max) before any GPU time is spent."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron_fsdp.param_and_grad_buffer", reason="megatron_fsdp is not installed")

BENCH = Path(__file__).resolve().parents[3] / "bench" / "megatron_fsdp_pool.py"


def test_plan_only_on_cpu():
    out = subprocess.run([sys.executable, str(BENCH), "--plan-only", "--hidden", "256", "--layers", "6"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "6 parameter groups" in text
    heavy, light = 2 * 4 * 256 * 256 + 4 * 256 + 256, 2 * 256 + 256 * 64 + 64 + 64 * 256
    assert f"unit 0 {heavy} el, unit 1 {light} el" in text
    arena = {m[0]: float(m[1]) for m in re.findall(r"^\s+(max|by_bytes|interval)\s+arena\s+([\d.]+) MiB", text, re.M)}
    assert set(arena) == {"max", "by_bytes", "interval"}
    # MaxPool: two heavy slots; interval: one heavy and one light unit (bf16, aligned to 256 B)
    assert arena["max"] == pytest.approx(2 * heavy * 2 / 2**20, abs=0.01)
    assert arena["interval"] == pytest.approx((heavy + light) * 2 / 2**20, abs=0.01)


def test_the_registration_run_alone_is_judged_as_the_parent_judges_it():
    # tools/gpu-stress runs `--child nccl_register` without the parent: its checks must decide
    # the child's exit status, or a failed registration would count as a passing run.
    import importlib.util

    spec = importlib.util.spec_from_file_location("megatron_fsdp_pool_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    good = {"rank": 0, "error": None, "segments": 1, "arena_in_segment": True, "slots_in_segment": True,
            "arena_bytes": 4096, "plan_arena_bytes": 4096, "registered": True, "all_reduce_right": True,
            "segments_after_cycle": 1, "arena_moved": False, "allocator": "NCCL (ncclMemAlloc)"}
    assert all(ok for _, ok in bench.registration_checks([good, {**good, "rank": 1}]))
    for bad in ({"all_reduce_right": False}, {"segments_after_cycle": 2}, {"arena_moved": True},
                {"segments": 2}, {"arena_bytes": 8192}):
        assert not all(ok for _, ok in bench.registration_checks([good, {**good, "rank": 1, **bad}])), bad
    raised = {"rank": 1, "error": "RuntimeError: ncclCommRegister failed"}
    texts = [text for text, ok in bench.registration_checks([good, raised]) if not ok]
    assert len(texts) == 2 and "rank 1: RuntimeError: ncclCommRegister failed" in texts[0]
