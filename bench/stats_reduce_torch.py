#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
"""PyTorch peers of bench_stats_reduce (C++): latency of reducing a memory report across 2 GPUs
(one process per GPU, NCCL), measured the same way: medians after warm-up, host wall clock
around the call and CUDA events on the current stream; the call starts from Python values and
ends with Python values, as a dashboard needs them.

  pr3645     Megatron-Bridge PR #3645, reduce_max_memory_across_pp_group: one float64 tensor of
             all values on the GPU, one all_reduce(MAX), .tolist(), ints restored
             (github.com/NVIDIA-NeMo/Megatron-Bridge/pull/3645), copied as written
  per_key    one all_reduce(MAX) per key (composer's MemoryMonitor pattern)
  device     all_reduce(MAX) of a float64 tensor already on the GPU: the collective alone

  headroom   headroom.torch.stats.max_memory_report: the C++ reducer's int64 wire words in one
             all_reduce(MAX) (after one key agreement per group), ints and floats exact

Report sizes: 8, 64 and 512 keys, half ints (around 2^40), half floats, as in the C++ bench.
Checks (headroom over NCCL; exit 1 when one fails, every rank reaching every collective):
  * exactness beyond 2^53: 2^53 + 1 on rank 0 against 2^53 - 1 on rank 1, 2^53 + 3 against
    2^53 + 2, 2^63 - 1, -(2^53 + 1), a float that is not an integer: the MAX comes back exact and
    typed (pr3645's float64 tensor rounds 2^53 + 1 and is shown for comparison);
  * a rank whose keys differ raises headroom.collective_mismatch on both ranks, within seconds:
    on the first call of a group (an extra key on rank 1), and after the group agreed (a key
    renamed on rank 1, as many keys as agreed); the group is usable after each (the next call
    with the same keys everywhere returns the exact max).
Prints a table, PASS/FAIL lines, then one JSON line (rank 0).

  python3 bench/stats_reduce_torch.py [--iterations 500] [--warmup 50]
  python3 bench/stats_reduce_torch.py --backend gloo --checks-only   # the checks on CPU (gloo)
  python3 bench/stats_reduce_torch.py --backend gloo --device cpu     # timings and checks on CPU (gloo)

--backend gloo --device cpu: the same methods on CPU tensors over gloo (2 processes, a file store),
host wall clock only, the methods interleaved in rounds (--round calls of each method per round) so
that a noisy shared machine slows them alike; pr3645 and per_key put their tensor on the CPU (the
only change to PR #3645's code). The ratio headroom / pr3645 is printed per size.
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

SIZES = (8, 64, 512)
METHODS = ("pr3645", "per_key", "device", "headroom")
# where pr3645 and per_key build their tensor: the current CUDA device (NCCL), or "cpu" (gloo)
_DEVICE = None


def _tensor_device():
    return torch.cuda.current_device() if _DEVICE is None else _DEVICE


def gather_checks(checks, group):
    """Every rank's checks, merged by name: passed only where it passed on every rank."""
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, checks, group=group)
    merged = {}
    for i, mine in enumerate(everyone):
        for name, ok, detail in mine:
            prev = merged.get(name, (True, ""))
            merged[name] = (prev[0] and ok, prev[1] if ok else f"{prev[1]} rank {i}: {detail}".strip())
    counts = {}
    for mine in everyone:
        for name, _, _ in mine:
            counts[name] = counts.get(name, 0) + 1
    return [(n, ok and counts[n] == len(everyone), d) for n, (ok, d) in merged.items()]


def report_checks(rank, all_checks):
    if rank == 0:
        for name, ok, detail in all_checks:
            print(f"{'PASS' if ok else 'FAIL'}  {name}" + ("" if ok or not detail else f"  ({detail})"))
    return all(ok for _, ok, _ in all_checks)


def make_report(rank, keys):
    report = {}
    for i in range(keys):
        name = f"memory/key.{i}"
        report[name] = (1 << 40) + 1000 * i + rank if i % 2 == 0 else -1.0 * i + 0.25 * rank
    return report


def reduce_max_memory_across_pp_group(memory_report, pp_group):
    """Megatron-Bridge PR #3645, as merged (commit 55c4e6676), minus the logging import."""
    if not memory_report:
        return memory_report
    if not dist.is_available() or not dist.is_initialized():
        return memory_report
    pp_size_attr = getattr(pp_group, "size", None)
    if not callable(pp_size_attr) or pp_size_attr() <= 1:
        return memory_report
    keys = list(memory_report.keys())
    values = torch.tensor([memory_report[k] for k in keys], dtype=torch.float64, device=_tensor_device())
    dist.all_reduce(values, op=dist.ReduceOp.MAX, group=pp_group)
    reduced = values.tolist()
    out = {}
    for k, v in zip(keys, reduced):
        original = memory_report[k]
        out[k] = int(v) if (not isinstance(original, bool) and isinstance(original, int)) else v
    return out


def per_key(memory_report, group):
    out = {}
    for k, v in memory_report.items():
        t = torch.tensor(v, dtype=torch.float64, device=_tensor_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        out[k] = int(t.item()) if isinstance(v, int) else t.item()
    return out


def headroom_checks(rank, world, group, timeout_s=10.0):
    """The exactness and key-agreement checks of headroom.torch.stats on `group` (any backend).
    Returns [(name, ok, detail)], the same names on every rank. Nothing here raises out of a
    collective that the other rank still waits in: every scenario is caught and recorded."""
    import headroom
    from headroom.torch import stats as hs

    hs.forget_agreements()
    checks = []

    def call(fn):
        t0 = time.perf_counter()
        try:
            return ("ok", fn()), time.perf_counter() - t0
        except headroom.collective_mismatch as e:
            return ("collective_mismatch", str(e)), time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - recorded as a failed check
            return (type(e).__name__, str(e)), time.perf_counter() - t0

    two53 = 1 << 53
    ranks_values = [
        {"big.plus1": two53 + 1, "big.plus3": two53 + 2, "int64.max": (1 << 63) - 1, "neg.big": -(two53 + 1),
         "float": 0.1, "small": 7, "flag": False},
        {"big.plus1": two53 - 1, "big.plus3": two53 + 3, "int64.max": (1 << 63) - 2, "neg.big": -(two53 + 3),
         "float": 0.30000000000000004, "small": 5, "flag": True},
    ]
    mine = dict(ranks_values[rank % 2])
    expect = {k: max(ranks_values[0][k], ranks_values[min(1, world - 1)][k]) for k in mine}
    got, _ = call(lambda: hs.max_memory_report(mine, group))
    exact = got[0] == "ok" and got[1] == expect and all(type(got[1][k]) is type(expect[k]) for k in expect)
    checks.append(("exact max beyond 2^53 (2^53+1, 2^53+3, 2^63-1, -(2^53+1)), typed", exact,
                   f"got {got}, expected {expect}"))
    steady, _ = call(lambda: hs.max_memory_report(mine, group))
    checks.append(("steady-state call (one all_reduce) exact as well", steady == ("ok", expect), f"got {steady}"))
    # float64 (pr3645's wire) cannot hold it: the comparison the exactness check is about
    checks.append(("float64 would have rounded 2^53+1", float(two53 + 1) != two53 + 1, ""))

    # a rank whose keys differ on the first call of a group: an extra key on rank 1
    hs.forget_agreements()
    extra = dict(mine)
    if rank == 1:
        extra["only.on.rank1"] = 1
    got, secs = call(lambda: hs.max_memory_report(extra, group))
    checks.append((f"extra key on rank 1, first call: collective_mismatch on every rank within {timeout_s:.0f} s",
                   got[0] == "collective_mismatch" and secs < timeout_s, f"{got[0]} after {secs:.3f} s: {got[1]}"[:400]))
    after, _ = call(lambda: hs.max_memory_report(mine, group))
    checks.append(("the group is usable after the first-call mismatch (exact max)", after == ("ok", expect), f"got {after}"))

    # after the group agreed: a key renamed on rank 1 (same count), caught by the wire header
    renamed = dict(mine)
    if rank == 1:
        renamed["small.renamed"] = renamed.pop("small")
    got, secs = call(lambda: hs.max_memory_report(renamed, group))
    checks.append((f"key renamed on rank 1 after agreement: collective_mismatch on every rank within {timeout_s:.0f} s",
                   got[0] == "collective_mismatch" and secs < timeout_s, f"{got[0]} after {secs:.3f} s: {got[1]}"[:400]))
    after, _ = call(lambda: hs.max_memory_report(mine, group))
    checks.append(("the group is usable after the renamed-key mismatch (exact max)", after == ("ok", expect),
                   f"got {after}"))
    return checks


def measure(fn, warmup, iterations):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    wall, event = [], []
    for _ in range(iterations):
        start.record()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        stop.record()
        stop.synchronize()
        wall.append((t1 - t0) * 1e6)
        event.append(start.elapsed_time(stop) * 1e3)
    return {"wall_us": statistics.median(wall), "event_us": statistics.median(event)}


def measure_interleaved(fns, warmup, iterations, round_calls):
    """Host wall clock of every fn in fns (name -> (fn, iterations)), in rounds: each round runs
    round_calls calls of each method in turn, until each has its iterations. Medians."""
    for fn, _ in fns.values():
        for _ in range(warmup):
            fn()
    wall = {name: [] for name in fns}
    while any(len(wall[n]) < it for n, (_, it) in fns.items()):
        for name, (fn, it) in fns.items():
            for _ in range(min(round_calls, it - len(wall[name]))):
                t0 = time.perf_counter()
                fn()
                wall[name].append((time.perf_counter() - t0) * 1e6)
    return {name: {"wall_us": statistics.median(w), "event_us": float("nan")} for name, w in wall.items()}


def cpu_worker(rank, world, args, port):
    """--backend gloo --device cpu: the timings on CPU tensors over gloo, methods interleaved."""
    global _DEVICE
    _DEVICE = "cpu"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{args.store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    group = dist.group.WORLD
    from headroom.torch import stats as hs

    checks = headroom_checks(rank, world, group)
    hs.forget_agreements()
    rows = []
    for keys in SIZES:
        report = make_report(rank, keys)
        first, second = make_report(0, keys), make_report(1, keys)
        expect = {k: max(first[k], second[k]) for k in report}
        got = reduce_max_memory_across_pp_group(report, group)
        assert got == expect and all(type(got[k]) is type(report[k]) for k in report), "pr3645 gave a wrong max"
        assert per_key(report, group) == expect, "per_key gave a wrong max"
        hs.forget_agreements()  # a new key set: agree on it once (outside the timing below)
        got_hr = hs.max_memory_report(report, group)
        checks.append((f"headroom {keys} keys: the max of both ranks, typed",
                       got_hr == expect and all(type(got_hr[k]) is type(report[k]) for k in report), ""))
        dev = torch.tensor(list(map(float, report.values())), dtype=torch.float64)
        per_key_iterations = max(10, args.iterations // (keys // 8 + 1))
        fns = {
            "pr3645": (lambda: reduce_max_memory_across_pp_group(report, group), args.iterations),
            "per_key": (lambda: per_key(report, group), per_key_iterations),
            "device": (lambda: dist.all_reduce(dev, op=dist.ReduceOp.MAX, group=group), args.iterations),
            "headroom": (lambda: hs.max_memory_report(report, group), args.iterations),
        }
        rows.append({"keys": keys, "bytes": keys * 8,
                     **measure_interleaved(fns, min(args.warmup, per_key_iterations), args.iterations, args.round)})
    all_checks = gather_checks(checks, group)
    if rank == 0:
        print(f"PyTorch {torch.__version__} all_reduce(MAX) of a memory report over gloo, 2 processes on CPU "
              f"({os.cpu_count()} cores), medians of {args.iterations} calls in rounds of {args.round}, "
              f"host wall microseconds")
        print(f"{'keys':>6} {'bytes':>8} | {'pr3645':>9} {'per_key':>9} {'device':>9} {'headroom':>9} | headroom/pr3645")
        for r in rows:
            cells = " ".join(f"{r[m]['wall_us']:9.1f}" for m in METHODS)
            print(f"{r['keys']:>6} {r['bytes']:>8} | {cells} | {r['headroom']['wall_us'] / r['pr3645']['wall_us']:.2f}x")
        report_checks(rank, all_checks)
        print(json.dumps({"bench": "stats_reduce_torch", "backend": "gloo", "device": "cpu", "ranks": 2,
                          "cpus": os.cpu_count(), "torch": torch.__version__, "iterations": args.iterations,
                          "round": args.round, "unit": "us",
                          "results": [{"keys": r["keys"], "bytes": r["bytes"],
                                       **{f"{m}_wall_us": r[m]["wall_us"] for m in METHODS},
                                       "headroom_over_pr3645": r["headroom"]["wall_us"] / r["pr3645"]["wall_us"]}
                                      for r in rows],
                          "headroom_checks": [{"check": n, "pass": ok} for n, ok, _ in all_checks]}))
    dist.barrier()
    dist.destroy_process_group()
    leave(0 if all(ok for _, ok, _ in all_checks) else 1)


def worker(rank, world, args, port):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank), timeout=datetime.timedelta(seconds=120))
    group = dist.group.WORLD
    from headroom.torch import stats as hs

    checks = headroom_checks(rank, world, group)
    hs.forget_agreements()
    rows = []
    for keys in SIZES:
        report = make_report(rank, keys)
        first, second = make_report(0, keys), make_report(1, keys)
        expect = {k: max(first[k], second[k]) for k in report}
        got = reduce_max_memory_across_pp_group(report, group)
        assert got == expect and all(type(got[k]) is type(report[k]) for k in report), "pr3645 gave a wrong max"
        assert per_key(report, group) == expect, "per_key gave a wrong max"
        hs.forget_agreements()  # a new key set: agree on it once (outside the timing below)
        got_hr = hs.max_memory_report(report, group)
        checks.append((f"headroom {keys} keys: the max of both ranks, typed",
                       got_hr == expect and all(type(got_hr[k]) is type(report[k]) for k in report), ""))
        dev = torch.tensor(list(map(float, report.values())), dtype=torch.float64, device="cuda")

        def device_only():
            dist.all_reduce(dev, op=dist.ReduceOp.MAX, group=group)
            torch.cuda.current_stream().synchronize()

        per_key_iterations = max(10, args.iterations // (keys // 8 + 1))
        rows.append({
            "keys": keys,
            "bytes": keys * 8,
            "pr3645": measure(lambda: reduce_max_memory_across_pp_group(report, group), args.warmup, args.iterations),
            "per_key": measure(lambda: per_key(report, group), min(args.warmup, per_key_iterations), per_key_iterations),
            "device": measure(device_only, args.warmup, args.iterations),
            "headroom": measure(lambda: hs.max_memory_report(report, group), args.warmup, args.iterations),
        })
    big = (1 << 53) + 1 + 2 * rank
    exact = reduce_max_memory_across_pp_group({"big": big, "x": 0.0}, group)["big"] == (1 << 53) + 3
    all_checks = gather_checks(checks, group)
    if rank == 0:
        name = torch.cuda.get_device_name(0)
        print(f"PyTorch {torch.__version__} all_reduce(MAX) of a memory report on 2 GPUs ({name}), "
              f"medians of {args.iterations} calls, microseconds (host wall / CUDA events)")
        print(f"{'keys':>6} {'bytes':>8} | {'pr3645':>15} {'per_key':>15} {'device':>15} {'headroom':>15}")
        for r in rows:
            cells = [f"{r[m]['wall_us']:6.1f} / {r[m]['event_us']:6.1f}" for m in METHODS]
            print(f"{r['keys']:>6} {r['bytes']:>8} | " + " ".join(f"{c:>15}" for c in cells))
        print(f"pr3645 exact for an int above 2^53: {exact}")
        report_checks(rank, all_checks)
        print(json.dumps({"bench": "stats_reduce_torch", "device": name, "gpus": 2, "torch": torch.__version__,
                          "iterations": args.iterations, "unit": "us", "pr3645_exact_above_2_53": exact,
                          "results": [{"keys": r["keys"], "bytes": r["bytes"],
                                       **{f"{m}_{k}": r[m][k] for m in METHODS
                                          for k in ("wall_us", "event_us")}} for r in rows],
                          "headroom_checks": [{"check": n, "pass": ok} for n, ok, _ in all_checks]}))
    dist.barrier()
    dist.destroy_process_group()
    leave(0 if all(ok for _, ok, _ in all_checks) else 1)


def leave(code):
    """Ends a rank once its process group is destroyed: output flushed, then out without the
    interpreter's teardown. torch's gloo threads can still be running there: one CI run
    (2026-11-28, torch 2.15, --checks-only on gloo) lost a rank to SIGABRT ("terminate called
    without an active exception") after every check had passed and been printed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def checks_worker(rank, world, args, port):
    """--checks-only: headroom's checks alone, on args.backend (gloo: CPU, no GPU needed)."""
    if args.backend == "nccl":
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank), timeout=datetime.timedelta(seconds=120))
    else:  # a file store (args.store): no TCP store to outlive on rank 0 at teardown
        dist.init_process_group(args.backend, init_method=f"file://{args.store}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
    all_checks = gather_checks(headroom_checks(rank, world, dist.group.WORLD), dist.group.WORLD)
    if rank == 0:
        print(f"headroom.torch.stats.max_memory_report over {args.backend}, {world} ranks, torch {torch.__version__}")
    ok = report_checks(rank, all_checks)
    if rank == 0:
        print(json.dumps({"bench": "stats_reduce_torch", "backend": args.backend, "checks_only": True,
                          "headroom_checks": [{"check": n, "pass": p} for n, p, _ in all_checks]}))
    dist.barrier()
    dist.destroy_process_group()
    leave(0 if ok else 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    parser.add_argument("--checks-only", action="store_true", help="headroom's checks, no timing")
    parser.add_argument("--device", default=None, choices=["cuda", "cpu"],
                        help="cpu: the timings on CPU tensors (with --backend gloo)")
    parser.add_argument("--round", type=int, default=50, help="calls of each method per round (--device cpu)")
    args = parser.parse_args()
    if args.iterations < 1 or args.warmup < 0:
        parser.error(f"--iterations must be >= 1 and --warmup >= 0, got {args.iterations} and {args.warmup}")
    if args.device is None:
        args.device = "cpu" if args.backend == "gloo" else "cuda"
    if args.backend == "gloo" and args.device != "cpu":
        parser.error("--backend gloo runs on CPU tensors (--device cpu)")
    if args.backend == "nccl" and args.device != "cuda":
        parser.error("--backend nccl runs on CUDA tensors (--device cuda)")
    if args.round < 1:
        parser.error(f"--round must be >= 1, got {args.round}")
    if args.backend == "nccl" and (not torch.cuda.is_available() or torch.cuda.device_count() < 2):
        print(f"skipped: needs 2 GPUs, found {torch.cuda.device_count() if torch.cuda.is_available() else 0}")
        return 77
    try:
        from headroom.torch import stats  # noqa: F401
    except ImportError as e:
        print(f"skipped: headroom's Python package is not importable ({e})")
        return 77
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    store_dir = tempfile.mkdtemp(prefix="stats_reduce_torch.")
    args.store = os.path.join(store_dir, "store")
    try:
        target = checks_worker if args.checks_only else cpu_worker if args.device == "cpu" else worker
        mp.spawn(target, args=(2, args, port), nprocs=2, join=True)
    except mp.ProcessExitedException as e:
        print(f"FAIL: a rank exited with {e.exit_code}")
        return 1
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
