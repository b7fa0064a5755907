# SPDX-License-Identifier: Apache-2.0
import json
import subprocess
import sys

from headroom import pool


def run(*args):
    return subprocess.run([sys.executable, "-m", "headroom", *args], capture_output=True, text=True)


def test_prints_the_plan_of_a_preset():
    out = run("--model", "Nemotron-H-4B", "--planner", "fixed", "--buffers", "3", "--units")
    assert out.returncode == 0, out.stderr
    p = pool.plan(pool.model_workload("Nemotron-H-4B"), "fixed", buffers=3)
    assert out.stdout == str(p) + p.describe_units()


def test_interval_plan_prints_its_lower_bound_and_json_has_every_offset():
    out = run("--model", "Falcon-H1-0.5B", "--planner", "interval")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("plan 'Falcon-H1-0.5B': planner=interval")
    assert "lower bound" in out.stdout.splitlines()[-1]
    js = run("--model", "Nemotron-3-Nano-30B-A3B", "--ep", "8", "--fp8", "--json")
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    p = pool.plan(pool.model_workload("Nemotron-3-Nano-30B-A3B", 8, fp8_params=True), "max")
    assert data["fingerprint"] == p.fingerprint and data == json.loads(json.dumps(pool.as_dict(p)))


def test_list_and_errors():
    assert run("--list").stdout.split("\n")[:-1] == pool.models.names()
    bad = run("--model", "GPT-5")
    assert bad.returncode == 2 and "no model 'GPT-5'; known: Nemotron-H-4B" in bad.stderr
    assert run("--buffers", "1").returncode == 2 and "buffers = 1" in run("--buffers", "1").stderr
    assert run("--grads", "int4").returncode == 2


def test_plans_lease_trace_files(tmp_path):
    t = pool.LeaseTrace()
    for b, n in enumerate((3000, 1000, 3000)):
        t.declare(b, unit=b, dtype="bfloat16", nbytes=n)
    for op, b in (("a", 0), ("a", 1), ("r", 0), ("a", 2), ("r", 1), ("r", 2)):
        t.acquire(b, (3000, 1000, 3000)[b]) if op == "a" else t.release(b)
    t.end_step()
    f = tmp_path / "x.trace"
    f.write_text(t.to_text())
    out = run("--trace", str(f))
    assert out.returncode == 0, out.stderr
    p = pool.plan_lifetimes(t)
    assert out.stdout == f"{f}: {p}\n"
    js = json.loads(run("--trace", str(f), "--planner", "max", "--json").stdout)
    assert js[0]["winner"] == "max" and js[0]["arena_bytes"] == p.candidates["max"]
    bad = tmp_path / "bad.trace"
    bad.write_text("headroom-lease-trace 1\nacquire 0 1\n")
    err = run("--trace", str(bad))
    assert err.returncode == 2 and "line 2: acquire of bucket 0, which was never declared" in err.stderr


def test_planner_names_are_the_adapters():
    """One name per planner across the C++, the CLI and headroom.torch.megatron_fsdp.install():
    the Python tuples are the C++ names (headroom.pool.planners, lifetime_planners), and the CLI
    takes each of them."""
    from headroom.__main__ import PLANNERS, main

    assert PLANNERS == tuple(dict.fromkeys(pool.planners + pool.lifetime_planners))
    for planner in PLANNERS:
        assert main(["--model", "Falcon-H1-0.5B", "--planner", planner]) == 0, planner

    by_bytes = run("--model", "Jamba-1.5-Mini", "--ep", "8", "--planner", "by_bytes")
    assert by_bytes.returncode == 0, by_bytes.stderr
    w = pool.model_workload("Jamba-1.5-Mini", 8)
    assert by_bytes.stdout == str(pool.plan(w, "max", category="by_bytes"))
    assert by_bytes.stdout == run("--model", "Jamba-1.5-Mini", "--ep", "8", "--category", "by_bytes").stdout
    try:
        from headroom.torch import megatron_fsdp
    except ImportError:  # no torch: the adapter's list cannot be read here
        return
    assert megatron_fsdp.PLANNERS == pool.lifetime_planners
