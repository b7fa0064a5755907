#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's allocator recorder against headroom's, on the same host in the same run.

    python3 bench/trace_record_torch.py [events]

PyTorch: torch.empty + del of one 64 KiB CUDA tensor (the caching allocator hands the same block
back: no cudaMalloc), timed with history off, then with
torch.cuda.memory._record_memory_history(max_entries=100000) for stacks="python" and
stacks="all"; the cost of recording is (time on - time off) per allocator event (an alloc and a
free_requested + free_completed per iteration are counted as 2 events, the way
bench_trace_record counts an alloc and a free). Medians of 5 runs.
Then bench_trace_record (<build>/bench_trace_record, <build> = $HEADROOM_BUILD_DIR or build/gpu)
runs with --pytorch-ns set to the python-stacks figure, so its table states the ratio.
Prints a table, then one JSON line (and bench_trace_record's own).
"""
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def loop_ns(torch, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x = torch.empty(1 << 14, device="cuda")
        del x
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / n


def main(argv):
    try:
        import torch
    except ImportError as ex:
        print(f"trace_record_torch.py: PyTorch is needed ({ex})")
        return 1
    if not torch.cuda.is_available():
        print("trace_record_torch.py: no CUDA device")
        return 1
    n = int(argv[0]) if argv else 20000
    loop_ns(torch, n // 10)  # warm-up: the caching allocator has the block
    rows = {}
    rows["off"] = statistics.median(loop_ns(torch, n) for _ in range(5))
    for stacks in ("python", "all"):
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks=stacks)
        loop_ns(torch, n // 10)
        rows[stacks] = statistics.median(loop_ns(torch, n) for _ in range(5))
        torch.cuda.memory._record_memory_history(enabled=None)
    per_event = {k: (rows[k] - rows["off"]) / 2 for k in ("python", "all")}
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}: torch.empty + del, ns per iteration")
    print(f"  history off            {rows['off']:10.0f}")
    for k in ("python", "all"):
        print(f"  history on, stacks={k:6s} {rows[k]:10.0f}   recording: {per_event[k]:8.0f} ns / event")
    print(json.dumps({"bench": "trace_record_torch", "torch": torch.__version__, "iter_off_ns": rows["off"],
                      "iter_python_ns": rows["python"], "iter_all_ns": rows["all"],
                      "record_python_ns_per_event": per_event["python"], "record_all_ns_per_event": per_event["all"]}))
    sys.stdout.flush()
    build = os.environ.get("HEADROOM_BUILD_DIR", os.path.join(HERE, "..", "build", "gpu"))
    exe = os.path.join(build, "bench_trace_record")
    if not os.path.exists(exe):
        print(f"bench_trace_record not found at {exe}: no ratio in this run")
        return 1
    return subprocess.run([exe, "--pytorch-ns", f"{max(per_event['python'], 0.0):.1f}"], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
