#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
# headroom: stress lanes (tools/gpu-stress --lanes: a file rendezvous of its own per run, bandwidth-bound)
"""headroom.torch.cp's gather over NCCL: two processes (cuda:0, cuda:1, the nccl backend), each a
CP rank of random packed batches (Partition.from_raw of random sequence lengths).

Checks, exact (torch.equal), for bf16 and fp32, against the single-rank reference (the whole
batch on one rank, in sequence order; the shard from the same partition on the CPU, where the ops
are torch index ops rather than headroom's kernels):
  * collect_output(policy="full"): every rank gets the batch back in sequence order, with the
    padded global cu_seqlens; backward of a loss computed identically on every rank gives cp x the
    split gradient (the reduce-scatter adjoint);
  * collect_output(policy="none"): the local shard equals the CPU split, local cu_seqlens;
  * collect_output(policy="per_token"): the per-token vectors (row max and min, exact in any order)
    gathered equal the same function of the whole batch;
  * gather(gradient="local"): only this rank's rows carry a gradient.
The checked batches have --check-tokens x --check-width (default 8192 x 1024), the timed one
--tokens x --width (default 16384 x 4096).
Timing (CUDA events, median of --iterations after --warmup): cp.gather of a [T/cp, width] shard by
each method (auto, all_gather, pipelined, in_place; each checked equal to all_gather's result)
against a bare dist.all_gather_into_tensor of the same bytes, and the gather of per-token vectors;
bf16 and fp32 at --width, bf16 at each of --extra-widths (151936, the logits). "agreement": the
extra time of a partition's first gather, whose ranks agree first (one all_gather of 9 int64 per
rank and a copy back to the host), over a later one.
Where the device time goes (--profile-calls, each case): torch.profiler's kernel records of
cp.gather (auto, pipelined), the bare all-gather and the per-token pair: the span of a call's
kernels, the NCCL kernel's own time, and the kernel time before it starts and after it ends.
Where the per-token gather's time goes (first case only): the host time of a call without waiting
(`cp.gather` and the bare all-gather, --host-calls back to back, the device never waited on), and
rank 0's cProfile of the same calls: the Python functions and builtins by own time per call.
A table on rank 0, PASS/FAIL lines, one JSON line; $OUT/cp_torch_gather_nccl.json when OUT is set.
Exit 1 when a check fails; "skipped: ..." and exit 77 without 2 GPUs, torch or headroom._cuda.

  python3 bench/cp_torch_gather_nccl.py [--tokens 16384] [--width 4096] [--iterations 20] [--warmup 5]
  python3 bench/cp_torch_gather_nccl.py --backend gloo --device cpu --tokens 512 --width 64 \
      --check-tokens 512 --check-width 64                                                 # CPU check
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
import traceback

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

SKIP = 77
GATHER_METHODS = ("auto", "all_gather", "pipelined", "in_place")  # headroom.torch.cp.gather(method=...)
TARGET = 1.10  # cp.gather / bare all-gather, large rows: the floor plus 10 %
PER_TOKEN_TARGET = 1.5  # the same for per-token vectors


def skip(why: str) -> None:
    print(f"skipped: {why}")
    sys.exit(SKIP)


def packed_cu(gen, tokens: int, max_len: int):
    """Boundaries of random sequences (1..max_len tokens, some empty) adding up to about `tokens`."""
    import torch

    cu = [0]
    while cu[-1] < tokens:
        n = int(torch.randint(0, max_len + 1, (1,), generator=gen))
        cu.append(min(tokens, cu[-1] + n))
    return cu


def make_batch(tokens, width, dtype, seed, world, rank, device):
    import torch
    from headroom.torch import cp

    gen = torch.Generator().manual_seed(seed)  # the same batch on every rank
    raw_cu = packed_cu(gen, tokens, max(1, tokens // 6))
    part = cp.Partition.from_raw(raw_cu, world, rank, total_multiple=64)
    ref_part = cp.Partition.from_raw(raw_cu, world, rank, total_multiple=64)  # the CPU reference's
    x = torch.randn(part.global_rows, width, generator=gen).to(dtype)
    w = torch.randn(part.global_rows, width, generator=gen).to(dtype)
    return part, ref_part, x, x.to(device), w.to(device)


def per_token(o):
    import torch

    f = o.float()
    return torch.stack([f.amax(-1), f.amin(-1)], -1)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_cost(fn, calls, profile: bool):
    """Host microseconds a call of fn() (calls back to back, no synchronisation inside; the caller
    synchronises around), and with profile the rows of a cProfile of another `calls` calls: (function,
    calls per call of fn, own µs per call of fn, cumulative µs per call of fn), by own time, top 12."""
    import cProfile
    import pstats

    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host_us = (time.perf_counter() - t0) * 1e6 / calls
    rows = []
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
        stats = pstats.Stats(prof).stats
        for (path, line, name), (_, ncalls, tottime, cumtime, _) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:12]:
            where = name if path == "~" else f"{os.path.basename(path)}:{line}({name})"
            rows.append((where, ncalls / calls, tottime * 1e6 / calls, cumtime * 1e6 / calls))
    else:
        for _ in range(calls):
            fn()
    return host_us, rows


def device_breakdown(fn, calls: int, device):
    """Where a call's device time goes, from torch.profiler's kernel records (CUPTI): calls of fn(),
    each followed by a synchronisation and a 1 ms pause, so a call's kernels form one group on the
    timeline. Per call: `span` first kernel start to last kernel end; `collective` the NCCL kernel;
    `before` first kernel start to the NCCL kernel's start; `after` the NCCL kernel's end to the
    last kernel's end (work exposed behind the collective); `kernels` launches. Medians, µs; None
    on the CPU."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if device.type != "cuda":
        return None
    fn()
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
            sync(device)
            time.sleep(1e-3)
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start
                     and "Memcpy" not in e.name and "Memset" not in e.name)
    return timeline_of(kernels)


def timeline_of(kernels, gap_us: float = 200):
    """device_breakdown's arithmetic on (start µs, end µs, name) kernel records sorted by start:
    groups split where the device was idle gap_us or more; groups without exactly one NCCL kernel
    are left out; medians per field, or None when no group is left."""
    groups, end = [], None
    for k in kernels:
        if end is None or k[0] > end + gap_us:
            groups.append([])
        groups[-1].append(k)
        end = k[1] if end is None else max(end, k[1])
    rows = {"span": [], "collective": [], "before": [], "after": [], "kernels": []}
    for g in groups:
        nccl = [k for k in g if k[2].startswith("nccl")]
        if len(nccl) != 1:
            continue
        first, last, (c0, c1, _) = min(k[0] for k in g), max(k[1] for k in g), nccl[0]
        for key, v in (("span", last - first), ("collective", c1 - c0), ("before", c0 - first),
                       ("after", last - c1), ("kernels", len(g))):
            rows[key].append(v)
    return {k: statistics.median(v) for k, v in rows.items()} if rows["span"] else None


def timed(fn, args, device):
    """Median milliseconds of fn() over args.iterations after args.warmup: CUDA events on the
    current stream, else the host clock."""
    import torch

    for _ in range(args.warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(args.iterations):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    else:
        for _ in range(args.iterations):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def checks_and_times(rank, world, args, device):
    import torch
    import torch.distributed as dist
    from headroom.torch import cp

    checks = []  # (name, ok, detail)

    def check(name, ok, detail=""):
        checks.append((name, bool(ok), detail))

    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    for i, (dname, dtype) in enumerate(dtypes.items()):
        for trial in range(args.batches):
            part, ref_part, x_cpu, x, w = make_batch(args.check_tokens, args.check_width, dtype, 1000 * i + trial, world,
                                                     rank, device)
            T = part.global_rows
            tag = f"{dname} batch {trial} (T={T}, {len(part.cu_seqlens) - 1} seqs)"
            # full: the whole batch back, in sequence order, on every rank; the reduce-scatter adjoint
            local = part.split(x).requires_grad_()
            got = cp.collect_output(local, part, policy="full")
            check(f"full {tag}: rows equal the single-rank batch", torch.equal(got.rows.cpu(), x_cpu))
            check(f"full {tag}: global padded cu_seqlens",
                  torch.equal(got.cu_seqlens.cpu().to(torch.int64), part.cu_seqlens.cpu().to(torch.int64)))
            (got.rows.float() * w.float()).sum().backward()
            expected_grad = ref_part.split((w.float() * world).to(dtype).cpu())
            check(f"full {tag}: gradient = cp x split(dy)", torch.equal(local.grad.cpu(), expected_grad))
            # none: the local shard (headroom's kernel) equals the CPU split (torch index ops)
            got = cp.collect_output(part.split(x), part, policy="none")
            check(f"none {tag}: shard equals the CPU split", torch.equal(got.rows.cpu(), ref_part.split(x_cpu)))
            check(f"none {tag}: local cu_seqlens",
                  torch.equal(got.cu_seqlens.cpu().to(torch.int64), ref_part.local_cu_seqlens.cpu().to(torch.int64)))
            # per_token: only the vectors cross, equal to the function of the whole batch
            got = cp.collect_output(part.split(x), part, policy="per_token", per_token=per_token)
            check(f"per_token {tag}: vectors equal per_token(whole batch)",
                  got.rows.shape == (T, 2) and torch.equal(got.rows.cpu(), per_token(x_cpu)))
            # gradient="local": this rank's rows only
            local = part.split(x).requires_grad_()
            (cp.gather(local, part, gradient="local").float() * w.float()).sum().backward()
            check(f"local-gradient {tag}: only this rank's rows", torch.equal(local.grad.cpu(), ref_part.split(w.cpu())))

    # timing: the gather (each method) against a bare all_gather_into_tensor of the same bytes; every
    # method's result equal to the all_gather method's (checked against the reference above)
    rows = []
    cases = [(dname, args.width) for dname in dtypes] + [("bf16", w) for w in args.extra_widths]
    for dname, width in cases:
        dtype = dtypes[dname]
        gen = torch.Generator().manual_seed(7)
        part = cp.Partition.from_raw(packed_cu(gen, args.tokens, max(1, args.tokens // 6)), world, rank,
                                     total_multiple=64)
        dgen = torch.Generator(device).manual_seed(7 + rank)
        local = torch.randn(part.local_rows, width, generator=dgen, device=device).to(dtype)
        out = torch.empty((part.global_rows, width), dtype=dtype, device=device)
        vec = per_token(local).contiguous()
        vec_out = torch.empty((part.global_rows, 2), dtype=vec.dtype, device=device)
        ref = cp.gather(local, part, method="all_gather")
        for m in GATHER_METHODS[1:]:
            check(f"gather method={m} {dname} {part.global_rows}x{width}: equals method=all_gather",
                  torch.equal(cp.gather(local, part, method=m), ref))
        del ref
        dist.barrier()
        methods = {m: timed(lambda m=m: cp.gather(local, part, method=m), args, device) for m in GATHER_METHODS}
        first_ms = timed(lambda: (part._agreed.clear(), cp.gather(local, part)), args, device)  # agree every time
        bare_ms = timed(lambda: dist.all_gather_into_tensor(out, local), args, device)
        vec_ms = timed(lambda: cp.gather(vec, part), args, device)
        vec_bare_ms = timed(lambda: dist.all_gather_into_tensor(vec_out, vec), args, device)
        timeline = {}
        if args.profile_calls > 0:  # where the device time goes (torch.profiler's kernel records)
            for name, fn in (("auto", lambda: cp.gather(local, part)),
                             ("pipelined", lambda: cp.gather(local, part, method="pipelined")),
                             ("all_gather", lambda: dist.all_gather_into_tensor(out, local)),
                             ("per-token cp.gather", lambda: cp.gather(vec, part)),
                             ("per-token all_gather", lambda: dist.all_gather_into_tensor(vec_out, vec))):
                dist.barrier()
                timeline[name] = device_breakdown(fn, args.profile_calls, device)
        host = {}
        if not rows and args.host_calls > 0:  # the first case: where the per-token gather's time goes
            for name, fn in (("cp.gather", lambda: cp.gather(vec, part)),
                             ("all_gather", lambda: dist.all_gather_into_tensor(vec_out, vec))):
                dist.barrier()
                sync(device)
                host[name] = host_cost(fn, args.host_calls, profile=rank == 0)
                sync(device)
        rows.append({"dtype": dname, "tokens": part.global_rows, "width": width,
                     "sequences": len(part.cu_seqlens) - 1, "bytes": part.global_rows * width * local.element_size(),
                     "gather_ms": methods["auto"], "methods_ms": methods, "all_gather_ms": bare_ms,
                     "ratio": methods["auto"] / bare_ms, "first_gather_ms": first_ms,
                     "agreement_ms": first_ms - methods["auto"],
                     "per_token_bytes": part.global_rows * 2 * vec.element_size(),
                     "per_token_gather_ms": vec_ms, "per_token_all_gather_ms": vec_bare_ms,
                     "per_token_ratio": vec_ms / vec_bare_ms,
                     "per_token_host_us": {k: v[0] for k, v in host.items()},
                     "per_token_profile": {k: v[1] for k, v in host.items()},
                     "device_timeline_us": timeline})
        del local, out
    return checks, rows


def worker(rank, world, args, store_file, result_dir):
    import torch
    import torch.distributed as dist

    result = {"rank": rank, "checks": [], "rows": [], "error": None}
    try:
        if args.device == "cuda":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
            dist.init_process_group(args.backend, init_method=f"file://{store_file}", rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=args.timeout), device_id=device)
            result["device"] = torch.cuda.get_device_name(device)
        else:
            device = torch.device("cpu")
            dist.init_process_group(args.backend, init_method=f"file://{store_file}", rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=args.timeout))
            result["device"] = "cpu"
        try:
            checks, rows = checks_and_times(rank, world, args, device)
            result["checks"] = [{"check": n, "pass": ok, "detail": d} for n, ok, d in checks]
            result["rows"] = rows
        finally:
            dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - reported by the parent, with the traceback
        result["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    # Out without the interpreter's teardown, where torch's threads can still be running: gloo
    # ranks were lost to SIGABRT there after their work was done (CI, torch 2.15, 2026-11-28).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def require(args) -> None:
    """Exits with SKIP ("skipped: why") unless torch.distributed, args.world CUDA devices (for
    --device cuda), NCCL (for --backend nccl) and headroom's package (with headroom._cuda for
    CUDA) are there."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        skip(f"torch is not importable ({e})")
    if not dist.is_available():
        skip("torch.distributed is not available")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            skip("no CUDA device")
        if torch.cuda.device_count() < args.world:
            skip(f"needs {args.world} GPUs, torch sees {torch.cuda.device_count()}")
        if args.backend == "nccl" and not dist.is_nccl_available():
            skip("torch.distributed has no NCCL")
    try:
        import headroom  # noqa: F401
        from headroom.torch import cp  # noqa: F401
    except ImportError as e:
        skip(f"headroom's Python package is not importable ({e})")
    if args.device == "cuda":
        try:
            from headroom import _cuda  # noqa: F401
        except ImportError as e:
            skip(f"headroom._cuda is not importable ({e}): build the package with HEADROOM_ENABLE_CUDA=ON")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--extra-widths", type=lambda v: [int(w) for w in v.split(",") if w], default=[151936],
                    help="more timed widths, bf16 only (default: 151936, the logits; '' for none)")
    ap.add_argument("--batches", type=int, default=3, help="random packed batches checked per dtype")
    ap.add_argument("--check-tokens", type=int, default=8192, help="tokens of the checked batches")
    ap.add_argument("--check-width", type=int, default=1024, help="row width of the checked batches")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=120, help="seconds for a collective before it fails")
    ap.add_argument("--host-calls", type=int, default=1000,
                    help="calls of the per-token host-cost measurement and its cProfile (0: none)")
    ap.add_argument("--profile-calls", type=int, default=20,
                    help="calls per method under torch.profiler for the device timeline (0: none)")
    args = ap.parse_args()
    if args.iterations < 1 or args.warmup < 0 or args.world < 2:
        ap.error("--iterations >= 1, --warmup >= 0, --world >= 2")
    require(args)
    import torch
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="cp_torch_gather_nccl.") as tmp:
        mp.spawn(worker, args=(args.world, args, os.path.join(tmp, "store"), tmp), nprocs=args.world, join=True)
        results = []
        for r in range(args.world):
            path = os.path.join(tmp, f"rank{r}.json")
            if not os.path.exists(path):
                print(f"FAIL  rank {r} wrote no result")
                return 1
            with open(path) as f:
                results.append(json.load(f))

    failed = False
    for res in results:
        if res["error"]:
            print(f"FAIL  rank {res['rank']}: {res['error']}")
            failed = True
    r0 = results[0]
    device = r0.get("device", "?")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    print(f"headroom.torch.cp gather over {args.backend}, {args.world} ranks on {device}, torch {torch.__version__}, {date}")
    if r0["rows"]:
        print(f"median of {args.iterations} after {args.warmup} warm-up, rank 0 "
              f"({'CUDA events' if args.device == 'cuda' else 'host clock'})\n")
        print(f"{'dtype':5s} {'tokens':>7s} {'seqs':>4s} {'width':>6s} {'MiB':>9s} | "
              + " ".join(f"{m:>10s}" for m in GATHER_METHODS)
              + f" {'all_gather':>10s} {'ratio':>6s} | {'per-token KiB':>13s} {'cp.gather':>10s} {'all_gather':>10s} {'ratio':>6s}"
              + f" | {'agreement':>10s}")
        for row in r0["rows"]:
            late = [] if row["ratio"] <= TARGET else [f"auto > {TARGET}x"]
            late += [] if row["per_token_ratio"] <= PER_TOKEN_TARGET else [f"per-token > {PER_TOKEN_TARGET}x"]
            print(f"{row['dtype']:5s} {row['tokens']:7d} {row['sequences']:4d} {row['width']:6d} {row['bytes'] / 2**20:9.2f} | "
                  + " ".join(f"{row['methods_ms'][m]:8.3f}ms" for m in GATHER_METHODS)
                  + f" {row['all_gather_ms']:8.3f}ms {row['ratio']:6.3f} | {row['per_token_bytes'] / 2**10:13.1f} "
                  f"{row['per_token_gather_ms']:8.3f}ms {row['per_token_all_gather_ms']:8.3f}ms {row['per_token_ratio']:6.3f}"
                  f" | {row['agreement_ms']:8.3f}ms" + (f"  ({', '.join(late)})" if late else ""))
        print(f"ratio = cp.gather (method auto) / bare all_gather_into_tensor; targets <= {TARGET}x, per-token <= "
              f"{PER_TOKEN_TARGET}x; agreement = a partition's first gather over a later one")
        if any(t for row in r0["rows"] for t in (row.get("device_timeline_us") or {}).values()):
            print(f"\nwhere the device time goes, rank 0, median of {args.profile_calls} calls under torch.profiler, µs: "
                  "span = first kernel start to last kernel end; before / after = kernels' time before the NCCL "
                  "kernel starts / after it ends")
            print(f"{'dtype':5s} {'tokens':>7s} {'width':>6s} {'what':22s} {'span':>9s} {'collective':>10s} "
                  f"{'before':>8s} {'after':>8s} {'kernels':>7s}")
            for row in r0["rows"]:
                for name, t in (row.get("device_timeline_us") or {}).items():
                    if t:
                        print(f"{row['dtype']:5s} {row['tokens']:7d} {row['width']:6d} {name:22s} {t['span']:9.1f} "
                              f"{t['collective']:10.1f} {t['before']:8.1f} {t['after']:8.1f} {t['kernels']:7.0f}")
        first = r0["rows"][0]
        if first.get("per_token_host_us"):
            print(f"\nper-token vectors, {first['dtype']} case: host us a call, {args.host_calls} calls back to back: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in first["per_token_host_us"].items()))
            for name, prof in first["per_token_profile"].items():
                print(f"  rank 0 cProfile of {name} (own us, cumulative us, calls per call):")
                for where, n, own, cum in prof:
                    print(f"    {own:8.2f} {cum:8.2f} {n:5.1f}  {where}")
        print()
    counts = {}
    for res in results:
        for c in res["checks"]:
            key = c["check"]
            ok, n = counts.get(key, (True, 0))
            counts[key] = (ok and c["pass"], n + 1)
    for name, (ok, n) in counts.items():
        if not ok or n != args.world:
            failed = True
        print(f"{'PASS' if ok and n == args.world else 'FAIL'}  {name} (on {n} of {args.world} ranks)")
    if not counts:
        failed = True
        print("FAIL  no check ran")
    summary = {"bench": "cp_torch_gather_nccl", "backend": args.backend, "device": device, "world": args.world,
               "date": date, "torch": torch.__version__, "tokens": args.tokens, "width": args.width,
               "iterations": args.iterations, "warmup": args.warmup, "rows": r0["rows"],
               "checks": len(counts), "checks_failed": sum(1 for ok, n in counts.values() if not ok or n != args.world),
               "pass": not failed}
    print(json.dumps(summary))
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "cp_torch_gather_nccl.json"), "w") as f:
            json.dump({**summary, "per_rank": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
