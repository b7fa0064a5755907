#!/usr/bin/env python3
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

Report sizes: 8, 64 and 512 keys, half ints (around 2^40), half floats, as in the C++ bench.
Also checks the exactness gap the C++ reducer closes: an int above 2^53 through pr3645.
Prints a table, then one JSON line (rank 0).

  python3 bench/stats_reduce_torch.py [--iterations 500] [--warmup 50]
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

SIZES = (8, 64, 512)


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
    values = torch.tensor([memory_report[k] for k in keys], dtype=torch.float64, device=torch.cuda.current_device())
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
        t = torch.tensor(v, dtype=torch.float64, device=torch.cuda.current_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        out[k] = int(t.item()) if isinstance(v, int) else t.item()
    return out


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


def worker(rank, world, args, port):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    group = dist.group.WORLD
    rows = []
    for keys in SIZES:
        report = make_report(rank, keys)
        first, second = make_report(0, keys), make_report(1, keys)
        expect = {k: max(first[k], second[k]) for k in report}
        got = reduce_max_memory_across_pp_group(report, group)
        assert got == expect and all(type(got[k]) is type(report[k]) for k in report), "pr3645 gave a wrong max"
        assert per_key(report, group) == expect, "per_key gave a wrong max"
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
        })
    big = (1 << 53) + 1 + 2 * rank
    exact = reduce_max_memory_across_pp_group({"big": big, "x": 0.0}, group)["big"] == (1 << 53) + 3
    if rank == 0:
        name = torch.cuda.get_device_name(0)
        print(f"PyTorch {torch.__version__} all_reduce(MAX) of a memory report on 2 GPUs ({name}), "
              f"medians of {args.iterations} calls, microseconds (host wall / CUDA events)")
        print(f"{'keys':>6} {'bytes':>8} | {'pr3645':>15} {'per_key':>15} {'device':>15}")
        for r in rows:
            cells = [f"{r[m]['wall_us']:6.1f} / {r[m]['event_us']:6.1f}" for m in ("pr3645", "per_key", "device")]
            print(f"{r['keys']:>6} {r['bytes']:>8} | " + " ".join(f"{c:>15}" for c in cells))
        print(f"pr3645 exact for an int above 2^53: {exact}")
        print(json.dumps({"bench": "stats_reduce_torch", "device": name, "gpus": 2, "torch": torch.__version__,
                          "iterations": args.iterations, "unit": "us", "pr3645_exact_above_2_53": exact,
                          "results": [{"keys": r["keys"], "bytes": r["bytes"],
                                       **{f"{m}_{k}": r[m][k] for m in ("pr3645", "per_key", "device")
                                          for k in ("wall_us", "event_us")}} for r in rows]}))
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    if args.iterations < 1 or args.warmup < 0:
        parser.error(f"--iterations must be >= 1 and --warmup >= 0, got {args.iterations} and {args.warmup}")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print(f"stats_reduce_torch: needs 2 GPUs, found {torch.cuda.device_count() if torch.cuda.is_available() else 0}",
              file=sys.stderr)
        return 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    mp.spawn(worker, args=(2, args, port), nprocs=2, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
