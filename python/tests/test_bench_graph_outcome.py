# SPDX-License-Identifier: Apache-2.0
"""bench/megatron_fsdp_graph_nemotronh.py's verdict of one child run, on the CPU (no torch): a
child that exits non-zero after every rank wrote its verdict (a crash in teardown) keeps that
verdict and still fails the bench (exit 2): before, its exit was cleared as "the teardown's" and
its stderr, with the crash's stack, was never printed."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import megatron_fsdp_graph_nemotronh as bench  # noqa: E402

PASSED = {"what": "capture", "status": "PASS", "loss_equal": True, "grads_equal": True, "eager_after_replay_equal": True,
          "addresses_fixed": True, "capture_leases_at_eager_addresses": True, "leases": 3, "replays": 2, "grads": 5,
          "eager_median_ms": 2.0, "replay_median_ms": 1.0}


def rank(r):
    return {"rank": r, "error": None, "strategies": {"a": dict(PASSED)}}


def run_of(rc, ranks, stderr=""):
    outcome = bench.child_outcome(rc, stderr, ranks, 2, 100)
    return {"variant": "dense", "allocator": "interval", "ranks": ranks, **outcome}


def test_a_clean_child_passes():
    printed, _, bad = bench.judged(run_of(0, [rank(0), rank(1)]))
    assert bad == "ok" and any("PASS" in line for line in printed)


def test_a_crash_after_every_verdict_keeps_the_verdict_and_is_an_error():
    run = run_of(-11, [rank(0), rank(1)], "Fatal Python error: Segmentation fault\n")
    assert run["error"] is None and run["teardown"].startswith("exit -11: Fatal Python error")
    printed, _, bad = bench.judged(run)
    assert bad == "error"
    assert any("PASS" in line for line in printed)  # the verdict stands
    assert printed[-1] == "dense/interval: ERROR after every rank's verdict: exit -11: Fatal Python error: Segmentation fault"


def test_a_child_without_every_verdict_is_an_error_without_one():
    printed, _, bad = bench.judged(run_of(1, [rank(0)], "RuntimeError: NCCL error\n"))
    assert bad == "error" and printed == ["dense/interval: ERROR (no verdict) exit 1: RuntimeError: NCCL error"]
    printed, _, bad = bench.judged(run_of(None, [rank(0), rank(1)]))
    assert bad == "error" and "no verdict within 100 s" in printed[0]
