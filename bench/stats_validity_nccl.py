#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
"""headroom.torch.stats over NCCL: a bad value on one rank raises on every rank (and how long that
takes on the others), type agreement after the steady state, exact max / gather with the rank
holding each max, peaks per phase from torch.cuda's counters, and the training_log drop-in.
One process per GPU; --ranks 4 on a 4-GPU machine adds sub-groups ({0,1},{2,3} as DP pairs and
{0,2},{1,3} as PP pairs) reduced at the same time.

Checks (exit 1 when one fails; every rank reaches every collective):
  * exact: max of ints past 2^53 (rank r holds 2^53 + 2r + 1), of 2^63 - 1 and of floats with
    -0.0 / inf, and gather's per-rank values with max / argmax (the holder is the last rank);
  * a bad value (a str, an int past int64, a numpy datetime) on one rank, cold (first call of a
    group) and warm (steady state), max and gather: invalid_argument on every rank naming that
    rank, the key and the value, and the next call returns that call's values (no off-by-one);
    the time from the call to the error on the other ranks is measured (medians and maxima over
    --trials, every rank in turn the bad one); the check is that the maximum is under 1 s;
  * int -> bool and int -> float on one rank after the steady state: collective_mismatch on every
    rank, then a correct result;
  * peaks per phase: in "forward" rank r allocates (r + 1) x 64 MiB; the reduced forward peak is
    the last rank's and at least its allocation; training_log_memory logs it with that rank;
  * --ranks 4: the same exact max / bad value inside each DP and PP pair while the other pair
    reduces its own values (the bad value stays in its pair).
Prints PASS/FAIL lines, then one JSON line (rank 0) with the timings.

  python3 bench/stats_validity_nccl.py                 # 2 GPUs
  python3 bench/stats_validity_nccl.py --ranks 4       # 4 GPUs, with sub-groups
  python3 bench/stats_validity_nccl.py --backend gloo  # the same on CPU processes (no GPU)
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

BIG = 2**53


def timed(fn):
    start = time.perf_counter()
    try:
        return ("ok", fn(), time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001 - classified by the checks
        return (type(e).__name__, str(e), time.perf_counter() - start)


class Checks:
    def __init__(self):
        self.rows = []

    def __call__(self, name, ok, detail=""):
        self.rows.append((name, bool(ok), str(detail)[:300]))


def exact(check, hs, group, members, rank, label):
    r = members.index(rank)
    n = len(members)
    mine = {"peak": BIG + 2 * r + 1, "int64.max": 2**63 - 1 - r, "ratio": [-0.0, float("inf"), 0.5, -1.0][r % 4],
            "oom": r == n - 1}
    got = timed(lambda: hs.max_memory_report(mine, group))
    want = {"peak": BIG + 2 * (n - 1) + 1, "int64.max": 2**63 - 1, "ratio": float("inf") if n > 1 else -0.0,
            "oom": True}
    check(f"{label}: exact max (ints past 2^53, int64 max, floats, bools)", got[0] == "ok" and got[1] == want
          and type(got[1]["oom"]) is bool, got[:2])
    again = timed(lambda: hs.max_memory_report(mine, group))
    check(f"{label}: steady-state max equals the first", again[:2] == got[:2], again[:2])
    table = timed(lambda: hs.gather(mine, group))
    ok = table[0] == "ok" and table[1]["peak"].values == tuple(BIG + 2 * q + 1 for q in range(n)) \
        and table[1]["peak"].argmax_rank == members[-1] and table[1]["peak"].argmin_rank == members[0]
    check(f"{label}: gather per-rank values, argmax = rank {members[-1]}", ok, table[:2])


def bad_values(check, hs, group, members, rank, label, trials, timings):
    n = len(members)
    r = members.index(rank)
    cases = [("str", "12", "key 'a' = '12' (str)"), ("int past int64", 2**64, "key 'a' = 18446744073709551616"),
             ("numpy datetime", np.datetime64("2026-01-01"), "key 'a' = np.datetime64")]
    for t in range(trials):
        bad = t % n
        name, value, text = cases[t % len(cases)]
        op = "max" if t % 2 == 0 else "gather"
        if t == 0:
            hs.forget_agreements()  # the first trial is cold: the group's first call
        dist.barrier(group=group)
        fn = hs.max_memory_report if op == "max" else hs.gather
        mine = {"a": value if r == bad else 10 + r, "b": 0.5}
        res = timed(lambda: fn(mine, group))
        named = f"rank {bad} of {n} has a value" in res[1] and text in res[1]  # the rank in the group
        check(f"{label}: {'cold' if t == 0 else 'warm'} {op}, {name} on rank {members[bad]}: invalid_argument "
              f"naming rank, key, value", res[0] == "invalid_argument" and named, res[:2])
        if r != bad:
            timings.append(res[2])
        nxt = timed(lambda: hs.max_memory_report({"a": 100 + r + t, "b": 0.5}, group))
        check(f"{label}: the call after trial {t} returns its own values", nxt[:2] == ("ok", {"a": 100 + n - 1 + t,
                                                                                              "b": 0.5}), nxt[:2])
    # type changes on one rank after the steady state
    for _ in range(2):
        hs.max_memory_report({"count": 1}, group)
    for what, value in (("bool", True), ("float", 1.0)):
        res = timed(lambda: hs.max_memory_report({"count": value if r == 0 else 2**60 + 3}, group))
        check(f"{label}: int -> {what} on rank {members[0]} after the steady state: collective_mismatch",
              res[0] == "collective_mismatch", res[:2])
        nxt = timed(lambda: hs.max_memory_report({"count": r}, group))
        check(f"{label}: then a correct result", nxt[:2] == ("ok", {"count": n - 1}), nxt[:2])


def phases_check(check, hs, rank, size, device):
    if device.type != "cuda":
        return
    phases = hs.Phases()
    with phases("forward"):
        x = torch.empty((rank + 1) * 64 << 20, dtype=torch.uint8, device=device)
        del x
    with phases("optimizer"):
        pass
    table = timed(lambda: phases.reduce())
    fwd = table[1].get("forward/allocated_bytes.all.peak") if table[0] == "ok" else None
    check("phases: forward peak is the last rank's, at least its allocation",
          fwd is not None and fwd.argmax_rank == size - 1 and fwd.max >= size * 64 << 20, table[:2])
    with phases("forward"):
        y = torch.empty((rank + 1) * 32 << 20, dtype=torch.uint8, device=device)
        del y
    log = timed(lambda: hs.training_log_memory({"num_alloc_retries": 0}, phases=phases))
    check("training_log_memory: world peak and the rank holding it",
          log[0] == "ok" and log[1]["memory/forward/allocated_bytes.all.peak.rank"] == size - 1
          and log[1]["memory/num_alloc_retries"] == 0, log[:2])


def worker(rank, size, args):
    if args.backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method=f"file://{args.store}", rank=rank, world_size=size,
                                device_id=device, timeout=datetime.timedelta(seconds=60))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=f"file://{args.store}", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=60))
    from headroom.torch import stats as hs

    check = Checks()
    timings = []
    world = list(range(size))
    exact(check, hs, None, world, rank, "world")
    bad_values(check, hs, None, world, rank, "world", args.trials, timings)
    phases_check(check, hs, rank, size, device)
    if size == 4:
        pairs = {"dp": ([0, 1], [2, 3]), "pp": ([0, 2], [1, 3])}
        for kind, groups in pairs.items():
            made = [dist.new_group(g) for g in groups]
            mine = next(i for i, g in enumerate(groups) if rank in g)
            exact(check, hs, made[mine], groups[mine], rank, f"{kind} pair {groups[mine]}")
            bad_values(check, hs, made[mine], groups[mine], rank, f"{kind} pair {groups[mine]}", 4, timings)
    everyone = [None] * size
    dist.all_gather_object(everyone, (check.rows, timings))
    if rank == 0:
        rows = [row for rows, _ in everyone for row in rows]
        all_times = [t for _, ts in everyone for t in ts]
        seen = set()
        for name, ok, detail in rows:
            if (name, ok) in seen:
                continue
            seen.add((name, ok))
            print(f"{'PASS' if ok else 'FAIL'}: {name}" + ("" if ok else f"  [{detail}]"))
        slowest = max(all_times) if all_times else float("nan")
        ok_time = slowest < 1.0
        print(f"{'PASS' if ok_time else 'FAIL'}: a bad value raised on the other ranks in {1e3 * statistics.median(all_times):.2f} ms "
              f"(median), {1e3 * slowest:.2f} ms (max) over {len(all_times)} measurements")
        failed = sum(not ok for _, ok, _ in rows) + (not ok_time)
        print(json.dumps({"bench": "stats_validity_nccl", "backend": args.backend, "ranks": size,
                          "device": torch.cuda.get_device_name(0) if args.backend == "nccl" else "cpu",
                          "torch": torch.__version__, "checks": len(rows) + 1, "failed": failed,
                          "bad_value_raise_ms": {"median": 1e3 * statistics.median(all_times),
                                                 "max": 1e3 * slowest, "n": len(all_times)}}))
        with open(args.verdict, "w") as f:
            f.write("ok" if failed == 0 else "fail")
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2, choices=[2, 3, 4])
    parser.add_argument("--trials", type=int, default=12, help="bad-value trials on the world group")
    parser.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    args = parser.parse_args()
    if args.backend == "nccl":
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if found < args.ranks:
            print(f"skipped: needs {args.ranks} GPUs, found {found}")
            return 77
    store_dir = tempfile.mkdtemp(prefix="stats_validity.")
    args.store = os.path.join(store_dir, "store")
    args.verdict = os.path.join(store_dir, "verdict")
    try:
        mp.spawn(worker, args=(args.ranks, args), nprocs=args.ranks, join=True)
        with open(args.verdict) as f:
            return 0 if f.read() == "ok" else 1
    except mp.ProcessExitedException as e:
        print(f"FAIL: a rank exited with {e.exit_code}")
        return 1
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
