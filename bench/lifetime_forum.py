#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
# headroom: stress lanes (tools/gpu-stress --lanes: its ranks meet on a free port of their own; 64 MiB all-reduces, bandwidth-bound)
# headroom: stress as short: --layers 4 --iterations 2 --warmup 1 --port {port} --trace {dir}/trace.csv
"""PyTorch peer of bench_lifetime_forum: the same forum case with PyTorch's caching allocator.

Two processes (one per GPU, NCCL backend). Per configuration, per iteration, per layer:
    y = x @ W[l]  (bf16, cuBLAS)  ->  all-reduce y on a communication stream  ->  next layer reads y
Configurations:
    no_allreduce     baseline
    record_stream    comm.wait_stream(compute); all_reduce on comm; y.record_stream(comm);
                     compute.wait_stream(comm)  -- the free of x is deferred by the allocator
    stream_ordered   the same without record_stream: x was allocated on compute, and compute waits
                     for comm on the device before x is freed, so the free is safe at once
    async_op         dist.all_reduce(y, async_op=True); work.wait()  -- ProcessGroupNCCL's own comm
                     stream with host-side stashing (PyTorch >= 2.8)
Peak memory is torch.cuda.max_memory_allocated / max_memory_reserved over the measured
iterations (the worse rank), time per iteration the median of CUDA-event timings after warm-up.
Prints a table, then one JSON line. The per-layer memory trace goes to --trace (default
$OUT/lifetime_memory_trace_torch.csv or ./lifetime_memory_trace_torch.csv), in the CSV format of
bench/lifetime_plot.py (pass it there with --torch).

    python3 bench/lifetime_forum.py [--layers 8] [--hidden 8192] [--batch 4096] [--iterations 5]
"""
import argparse
import json
import os
import statistics
import sys
import time

CONFIGS = ["no_allreduce", "stream_ordered", "record_stream", "async_op"]


def run_config(cfg, args, rank, weights, x0, compute, comm, trace):
    import torch
    import torch.distributed as dist

    def layer_pass(iteration, record):
        x = x0
        for l in range(args.layers):
            y = torch.matmul(x, weights[l])
            if cfg == "record_stream" or cfg == "stream_ordered":
                comm.wait_stream(compute)
                with torch.cuda.stream(comm):
                    dist.all_reduce(y)
                if cfg == "record_stream":
                    y.record_stream(comm)
                compute.wait_stream(comm)
            elif cfg == "async_op":
                work = dist.all_reduce(y, async_op=True)
                work.wait()
            del x  # the previous output goes back to the allocator here
            x = y
            if record:
                trace.append((cfg, rank, iteration, l, (time.perf_counter() - t0) * 1e3,
                              torch.cuda.memory_allocated(), torch.cuda.memory_reserved()))
        return x

    with torch.cuda.stream(compute):
        t0 = time.perf_counter()
        for i in range(args.warmup):
            layer_pass(i, False)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        dist.barrier()
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(args.iterations + 1)]
        t0 = time.perf_counter()
        out = None
        for i in range(args.iterations):
            marks[i].record(compute)
            out = layer_pass(args.warmup + i, True)
        marks[-1].record(compute)
        torch.cuda.synchronize()
    ms = [marks[i].elapsed_time(marks[i + 1]) for i in range(args.iterations)]
    checksum = float(out.float().abs().sum().item())
    del out
    result = dict(policy=cfg, peak_used_bytes=torch.cuda.max_memory_allocated(),
                  peak_reserved_bytes=torch.cuda.max_memory_reserved(), ms_per_iter=ms,
                  ms_per_iter_median=statistics.median(ms), checksum=checksum)
    torch.cuda.empty_cache()
    return result


def worker(rank, world, args, port):
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    gen = torch.Generator(device="cuda").manual_seed(1000)
    scale = (3.0 / args.hidden) ** 0.5
    weights = [((torch.rand(args.hidden, args.hidden, device="cuda", generator=gen) * 2 - 1) * scale).to(torch.bfloat16)
               for _ in range(args.layers)]
    gen.manual_seed(7 + rank)
    x0 = (torch.rand(args.batch, args.hidden, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    compute = torch.cuda.Stream()
    comm = torch.cuda.Stream()
    results, trace = [], []
    for cfg in CONFIGS:
        results.append(run_config(cfg, args, rank, weights, x0, compute, comm, trace))
    gathered = [None] * world
    dist.all_gather_object(gathered, (results, trace))
    if rank == 0:
        report(args, gathered, torch.cuda.get_device_name(0), torch.__version__)
    dist.barrier()
    dist.destroy_process_group()


def fmt(n):
    return f"{n / (1 << 30):.2f} GiB" if n >= (1 << 30) else f"{n / (1 << 20):.2f} MiB"


def report(args, gathered, device, version):
    rows = []
    for k, cfg in enumerate(CONFIGS):
        per_rank = [g[0][k] for g in gathered]
        rows.append(dict(policy=cfg,
                         peak_used_bytes=max(r["peak_used_bytes"] for r in per_rank),
                         peak_reserved_bytes=max(r["peak_reserved_bytes"] for r in per_rank),
                         ms_per_iter_median=max(r["ms_per_iter_median"] for r in per_rank),
                         ms_per_iter_rank0=per_rank[0]["ms_per_iter"],
                         checksum=per_rank[0]["checksum"]))
    base = rows[0]["peak_used_bytes"]
    print(f"lifetime_forum (PyTorch {version}): {args.layers} layers of [{args.batch} x {args.hidden}] @ "
          f"[{args.hidden} x {args.hidden}] bf16, 2 ranks, {args.iterations} iterations (+{args.warmup} warm-up), "
          f"device {device}")
    print(f"{'policy':<16} {'peak used':>14} {'peak reserved':>14} {'used/base':>10} {'ms/iter (med)':>14}")
    for r in rows:
        print(f"{r['policy']:<16} {fmt(r['peak_used_bytes']):>14} {fmt(r['peak_reserved_bytes']):>14} "
              f"{r['peak_used_bytes'] / base:>10.3f} {r['ms_per_iter_median']:>14.3f}")
    with open(args.trace, "w") as f:
        f.write("policy,rank,iteration,layer,t_ms,used_bytes,reserved_bytes\n")
        for _, trace in gathered:
            for row in trace:
                f.write(",".join(str(v) for v in row) + "\n")
    print(f"memory trace: {args.trace}")
    agree = len({r["checksum"] for r in rows[1:]}) == 1
    print(json.dumps(dict(bench="lifetime_forum_torch", device=device, torch=version, ranks=2, layers=args.layers,
                          hidden=args.hidden, batch=args.batch, iterations=args.iterations,
                          results=[{k: v for k, v in r.items() if k != "checksum"} for r in rows],
                          outputs_agree=agree)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--trace", default=os.path.join(os.environ.get("OUT", "."), "lifetime_memory_trace_torch.csv"))
    args = ap.parse_args()
    for name in ("layers", "hidden", "batch", "iterations"):
        if getattr(args, name) <= 0:
            sys.exit(f"lifetime_forum.py: --{name} must be positive, got {getattr(args, name)}")
    if args.warmup < 0:
        sys.exit(f"lifetime_forum.py: --warmup must be >= 0, got {args.warmup}")

    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < 2:
        print(f"skipped: lifetime_forum.py needs 2 CUDA devices, found {torch.cuda.device_count()}")
        sys.exit(77)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    mp.spawn(worker, args=(2, args, args.port), nprocs=2, join=True)


if __name__ == "__main__":
    main()
