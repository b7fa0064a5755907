#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 4 GPUs
"""headroom.torch.cp over torch.distributed groups: 4 processes (cuda:0..3, the nccl backend) as
one CP group of 4, as two CP groups of 2 carved from the world with dist.new_group (cp = 2 x
dp = 2: ranks {0, 1} and {2, 3}), and as two strided CP groups of 2 ({0, 2} and {1, 3}).

Checks, exact (torch.equal), for bf16 and fp32, on random packed batches (each DP group its own
batch, so rows that crossed groups would show) against the single-rank reference (the whole batch
on one rank in sequence order; this rank's shard split on the CPU, where the ops are torch index
ops), for every policy of headroom.torch.cp.GatherOutput:
  * full: the whole batch in sequence order and the padded global cu_seqlens on every rank of the
    group; a loss computed alike on every rank gives cp x split(dy) (gradient="reduce_scatter")
    or this rank's rows only (gradient="local");
  * none: the local shard equals the CPU split, with the local cu_seqlens;
  * per_token: the gathered per-token vectors (row max and min) equal those of the whole batch;
  * a partition of another CP size than the group raises headroom.invalid_argument on every rank.
Timing (CUDA events, median of --iterations after --warmup, rank 0): cp.gather of a [T/cp, width]
shard against a bare dist.all_gather_into_tensor of the same bytes, bf16 and fp32, T about
--tokens (the batch padded), at cp = 4 over the world and at cp = 2 in both DP groups at once.
Output, last: one JSON line, the checks per group layout and policy, the timing table and one
verdict line "cp_torch_groups: PASS (n of n checks)"; $OUT/cp_torch_groups.json when OUT is set.
Exit 1 when a check fails or the run passes --deadline; "skipped: ..." and exit 77 without 4
GPUs, torch or headroom._cuda. The helpers are bench/cp_torch_gather_nccl.py's (cp = 2, world).

  python3 bench/cp_torch_groups.py [--tokens 16448] [--width 4096] [--iterations 20] [--warmup 5]
  python3 bench/cp_torch_groups.py --backend gloo --device cpu --tokens 512 --width 64 \
      --check-tokens 512 --check-width 64 --batches 1 --iterations 2 --warmup 1         # CPU check
"""
import argparse
import datetime
import json
import os
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cp_torch_gather_nccl import make_batch, per_token, require, timed  # noqa: E402


def layouts(world: int):
    """(name, CP groups as rank lists) for a world of `world` ranks."""
    half = world // 2
    return [(f"cp={world}", [list(range(world))]),
            (f"cp={half} x dp=2", [list(range(half)), list(range(half, world))]),
            (f"cp={half} x dp=2 strided", [list(range(0, world, 2)), list(range(1, world, 2))])]


def check_layout(rank, name, groups, handles, args, device, check):
    """Every policy over this rank's CP group of one layout, against the single-rank reference."""
    import torch

    import headroom
    from headroom.torch import cp

    dp = next(i for i, g in enumerate(groups) if rank in g)
    ranks, group = groups[dp], handles[dp]
    size, cp_rank = len(ranks), ranks.index(rank)
    for i, (dname, dtype) in enumerate({"bf16": torch.bfloat16, "fp32": torch.float32}.items()):
        for trial in range(args.batches):
            seed = 10000 * len(groups) + 1000 * dp + 100 * i + trial  # one batch per DP group
            part, ref_part, x_cpu, x, w = make_batch(args.check_tokens, args.check_width, dtype, seed, size, cp_rank,
                                                     device)
            tag = f"{dname}, T={part.global_rows}"
            # references of every policy: (rows, cu_seqlens) as the single rank computes them
            refs = {cp.GatherOutput.FULL: (x_cpu, part.cu_seqlens),
                    cp.GatherOutput.NONE: (ref_part.split(x_cpu), ref_part.local_cu_seqlens),
                    cp.GatherOutput.PER_TOKEN: (per_token(x_cpu), part.cu_seqlens)}
            for policy in cp.GatherOutput:
                if policy not in refs:
                    check(name, policy.value, False, f"no reference for policy {policy.value!r}")
                    continue
                local = part.split(x).requires_grad_(policy is cp.GatherOutput.FULL)
                got = cp.collect_output(local, part, group, policy, per_token=per_token)
                rows, cu = refs[policy]
                ok = torch.equal(got.rows.detach().cpu(), rows) and torch.equal(got.cu_seqlens.cpu().long(), cu.long())
                check(name, policy.value, ok, f"{tag}: rows or cu_seqlens differ from the single-rank reference")
                if policy is cp.GatherOutput.FULL:
                    (got.rows.float() * w.float()).sum().backward()
                    expected = ref_part.split((w.float() * size).to(dtype).cpu())
                    check(name, "full, gradient reduce_scatter", torch.equal(local.grad.cpu(), expected),
                          f"{tag}: gradient is not cp x split(dy)")
                    local = part.split(x).requires_grad_()
                    got = cp.collect_output(local, part, group, policy, gradient="local")
                    (got.rows.float() * w.float()).sum().backward()
                    check(name, "full, gradient local", torch.equal(local.grad.cpu(), ref_part.split(w.cpu())),
                          f"{tag}: gradient is not this rank's rows of dy")
    # a partition of another CP size than the group: refused on every rank, before any collective
    other = 2 if size != 2 else size * 2
    wrong = cp.Partition([0, 4 * other], other, cp_rank % other)
    try:
        cp.gather(wrong.split(torch.zeros(4 * other, device=device)), wrong, group)
        check(name, "another cp size", False, "gather did not raise")
    except headroom.invalid_argument as e:
        check(name, "another cp size", f"rank {cp_rank} of {size}" in str(e) and f"cp_size {other}" in str(e), str(e))


def time_layout(rank, name, groups, handles, args, device):
    """cp.gather against a bare all_gather_into_tensor of the same bytes in this rank's group."""
    import torch
    import torch.distributed as dist
    from headroom.torch import cp

    dp = next(i for i, g in enumerate(groups) if rank in g)
    ranks, group = groups[dp], handles[dp]
    rows = []
    for dname, dtype in {"bf16": torch.bfloat16, "fp32": torch.float32}.items():
        part, _, _, x, _ = make_batch(args.tokens, args.width, dtype, 7, len(ranks), ranks.index(rank), device)
        local = part.split(x).contiguous()
        del x
        out = torch.empty((part.global_rows, args.width), dtype=dtype, device=device)
        dist.barrier()
        gather_ms = timed(lambda: cp.gather(local, part, group), args, device)
        bare_ms = timed(lambda: dist.all_gather_into_tensor(out, local, group=group), args, device)
        rows.append({"layout": name, "cp": len(ranks), "dtype": dname, "tokens": part.global_rows, "width": args.width,
                     "bytes": part.global_rows * args.width * local.element_size(), "gather_ms": gather_ms,
                     "all_gather_ms": bare_ms, "ratio": gather_ms / bare_ms})
    return rows


def worker(rank, world, args, store_file, result_dir):
    import torch
    import torch.distributed as dist

    result = {"rank": rank, "checks": [], "rows": [], "error": None}

    def check(layout, kind, ok, detail):
        result["checks"].append({"layout": layout, "check": kind, "pass": bool(ok), "detail": "" if ok else detail})

    try:
        kw = {}
        if args.device == "cuda":
            torch.cuda.set_device(rank)
            device = kw["device_id"] = torch.device("cuda", rank)
            result["device"] = torch.cuda.get_device_name(device)
        else:
            device = torch.device("cpu")
            result["device"] = "cpu"
        dist.init_process_group(args.backend, init_method=f"file://{store_file}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=args.timeout), **kw)
        try:
            for i, (name, groups) in enumerate(layouts(world)):
                # every rank creates every group, in the same order; one group of all: the world
                handles = [None] if len(groups) == 1 else [dist.new_group(g) for g in groups]
                check_layout(rank, name, groups, handles, args, device, check)
                if i < 2:  # timed: cp = world, and cp = world / 2 in both DP groups at once
                    result["rows"] += time_layout(rank, name, groups, handles, args, device)
        finally:
            dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - reported by the parent, with the traceback
        result["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def run_workers(args, tmp):
    """The workers' results, or a reason they did not all finish by the deadline."""
    import torch.multiprocessing as mp

    ctx = mp.spawn(worker, args=(args.world, args, os.path.join(tmp, "store"), tmp), nprocs=args.world, join=False)
    deadline = time.monotonic() + args.deadline
    try:
        while not ctx.join(timeout=2):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                return None, f"the workers did not finish within --deadline {args.deadline} s"
    except Exception as e:  # noqa: BLE001 - a worker that died (its exit code, its traceback)
        return None, f"a worker failed: {e}"
    results = []
    for r in range(args.world):
        path = os.path.join(tmp, f"rank{r}.json")
        if not os.path.exists(path):
            return None, f"rank {r} wrote no result"
        with open(path) as f:
            results.append(json.load(f))
    return results, None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=16448, help="tokens of the timed batch (before padding)")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batches", type=int, default=2, help="random packed batches checked per dtype and layout")
    ap.add_argument("--check-tokens", type=int, default=4096, help="tokens of the checked batches")
    ap.add_argument("--check-width", type=int, default=512, help="row width of the checked batches")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=60, help="seconds for a collective before it fails")
    ap.add_argument("--deadline", type=int, default=None,
                    help="seconds for the whole run before its workers are killed and it fails (120 on CUDA, 600 on CPU)")
    args = ap.parse_args()
    if args.deadline is None:
        args.deadline = 120 if args.device == "cuda" else 600
    if args.iterations < 1 or args.warmup < 0 or args.batches < 1 or args.world < 4 or args.world % 2:
        ap.error(f"--iterations {args.iterations} >= 1, --warmup {args.warmup} >= 0, --batches {args.batches} >= 1, "
                 f"--world {args.world} even and >= 4 expected")
    require(args)
    import torch

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cp_torch_groups.") as tmp:
        results, why = run_workers(args, tmp)
    if results is None:
        print(f"FAIL  {why}")
        print(f"cp_torch_groups: FAIL ({why})")
        return 1
    failed = False
    for res in results:
        if res["error"]:
            print(f"FAIL  rank {res['rank']}: {res['error']}")
            failed = True
    # (layout, check) -> [passed, total, ranks seen, first failure]
    table = {}
    for res in results:
        seen = set()
        for c in res["checks"]:
            key = (c["layout"], c["check"])
            t = table.setdefault(key, [0, 0, 0, ""])
            t[0] += c["pass"]
            t[1] += 1
            if key not in seen:
                seen.add(key)
                t[2] += 1
            if not c["pass"] and not t[3]:
                t[3] = f"rank {res['rank']}: {c['detail']}"
    bad = [k for k, (ok, n, ranks, _) in table.items() if ok != n or ranks != args.world]
    failed = failed or bool(bad) or not table
    device = results[0].get("device", "?")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    rows = results[0]["rows"]
    summary = {"bench": "cp_torch_groups", "backend": args.backend, "device": device, "world": args.world, "date": date,
               "torch": torch.__version__, "iterations": args.iterations, "warmup": args.warmup,
               "checks": sum(t[1] for t in table.values()), "checks_failed": sum(t[1] - t[0] for t in table.values()),
               "rows": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
               "seconds": round(time.monotonic() - t0, 1), "pass": not failed}
    print(json.dumps(summary))
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "cp_torch_groups.json"), "w") as f:
            json.dump({**summary, "per_rank": results}, f, indent=1)

    print(f"\nheadroom.torch.cp over {args.backend} groups, {args.world} ranks on {device}, torch {torch.__version__}, "
          f"{date}; exact checks against the single-rank reference ({args.batches} batches x bf16, fp32 per group)")
    for (layout, kind), (ok, n, ranks, first) in table.items():
        verdict = "PASS" if ok == n and ranks == args.world else "FAIL"
        print(f"{verdict}  {layout:22s} {kind:30s} {ok:3d} of {n:3d} on {ranks} of {args.world} ranks"
              f"{'  ' + first[:200] if first else ''}")
    if rows:
        print(f"\ncp.gather vs all_gather_into_tensor, rank 0, median of {args.iterations} after {args.warmup} warm-up "
              f"({'CUDA events' if args.device == 'cuda' else 'host clock'})")
        print(f"{'layout':22s} {'cp':>3s} {'dtype':5s} {'tokens':>7s} {'width':>6s} {'MiB':>8s} | {'cp.gather':>10s} "
              f"{'all_gather':>10s} {'ratio':>6s}")
        for r in rows:
            print(f"{r['layout']:22s} {r['cp']:3d} {r['dtype']:5s} {r['tokens']:7d} {r['width']:6d} {r['bytes'] / 2**20:8.2f} | "
                  f"{r['gather_ms']:8.3f}ms {r['all_gather_ms']:8.3f}ms {r['ratio']:6.3f}")
    checks = sum(t[1] for t in table.values())
    print(f"cp_torch_groups: {'FAIL' if failed else 'PASS'} ({checks - summary['checks_failed']} of {checks} checks, "
          f"{summary['seconds']} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
