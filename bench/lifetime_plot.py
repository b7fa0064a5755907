#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots the memory trace of bench_lifetime_forum (and optionally bench/lifetime_forum.py).

    python3 bench/lifetime_plot.py [TRACE.csv [OUT.png]] [--rank R] [--torch TORCH_TRACE.csv]

Without arguments it reads the traces where bench_lifetime_forum and bench/lifetime_forum.py write
them by default ($OUT/ when OUT is set, else ./) and writes $OUT/lifetime_memory.png (or
docs/img/lifetime_memory.png); when no trace is there yet it says so and exits 0, so that a batch
that runs every bench/*.py before the C++ benchmarks does not fail on it.

TRACE.csv has the columns policy,rank,iteration,layer,t_ms,used_bytes,reserved_bytes (one row per
layer, sampled from the host after the layer was issued). The figure has two panels, bytes in use
and bytes reserved by the pool, one line per policy against the layer step (iteration x layers +
layer), for one rank (default 0).
"""
import argparse
import csv
import os
import sys
from collections import defaultdict

ORDER = ["no_allreduce", "stream_ordered", "deferred", "blocking"]
STYLE = {
    "no_allreduce": dict(color="#555555", linestyle=":", linewidth=2.0),
    "stream_ordered": dict(color="#1f77b4", linewidth=2.0),
    "deferred": dict(color="#d62728", linewidth=2.0),
    "blocking": dict(color="#2ca02c", linestyle="--", linewidth=1.5),
}


def read_trace(path, rank, prefix=""):
    series = defaultdict(list)  # policy -> [(step, used, reserved)]
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        need = {"policy", "rank", "iteration", "layer", "used_bytes", "reserved_bytes"}
        missing = need - set(reader.fieldnames or [])
        if missing:
            sys.exit(f"lifetime_plot: {path} lacks columns {sorted(missing)}; expected {sorted(need)}")
        rows = [r for r in reader if int(r["rank"]) == rank]
    if not rows:
        sys.exit(f"lifetime_plot: {path} has no rows for rank {rank}")
    layers = 1 + max(int(r["layer"]) for r in rows)
    first_iteration = min(int(r["iteration"]) for r in rows)
    for r in rows:
        step = (int(r["iteration"]) - first_iteration) * layers + int(r["layer"]) + 1
        series[prefix + r["policy"]].append((step, int(r["used_bytes"]), int(r["reserved_bytes"])))
    for v in series.values():
        v.sort()
    return series, layers


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    out_dir = os.environ.get("OUT")
    default_dir = out_dir if out_dir else "."
    ap.add_argument("trace", nargs="?", help="trace CSV of bench_lifetime_forum")
    ap.add_argument("out", nargs="?", default=os.path.join(out_dir, "lifetime_memory.png") if out_dir
                    else os.path.join("docs", "img", "lifetime_memory.png"))
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--torch", help="trace CSV of bench/lifetime_forum.py, drawn with thin lines")
    args = ap.parse_args()
    if args.trace is None:
        args.trace = os.path.join(default_dir, "lifetime_memory_trace.csv")
        if not os.path.exists(args.trace):
            print(f"lifetime_plot: no trace at {args.trace}; run bench_lifetime_forum first (nothing plotted)")
            return
        torch_trace = os.path.join(default_dir, "lifetime_memory_trace_torch.csv")
        if args.torch is None and os.path.exists(torch_trace):
            args.torch = torch_trace

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series, layers = read_trace(args.trace, args.rank)
    if args.torch:
        torch_series, _ = read_trace(args.torch, args.rank, prefix="torch ")
        series.update(torch_series)

    gib = float(1 << 30)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharex=True)
    names = [p for p in ORDER if p in series] + sorted(p for p in series if p not in ORDER)
    for name in names:
        pts = series[name]
        base = name.replace("torch ", "")
        style = dict(STYLE.get(base, {}))
        if name.startswith("torch "):
            style.update(linewidth=1.0, alpha=0.8)
        steps = [p[0] for p in pts]
        axes[0].plot(steps, [p[1] / gib for p in pts], label=name, **style)
        axes[1].plot(steps, [p[2] / gib for p in pts], label=name, **style)
    for ax, title in zip(axes, ["pool bytes in use", "pool bytes reserved"]):
        ax.set_title(title)
        ax.set_xlabel(f"layer issued by the host (iterations of {layers} layers)")
        ax.set_ylabel("GiB")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        last = max(p[0] for pts in series.values() for p in pts)
        for x in range(layers, last + 1, layers):
            ax.axvline(x + 0.5, color="#cccccc", linewidth=0.8, zorder=0)
    axes[0].legend(loc="upper left", fontsize=9)
    fig.suptitle(f"Forum case: all-reduce of each layer's output on a comm stream (rank {args.rank})")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=130)
    print(f"lifetime_plot: wrote {args.out} ({len(names)} series)")


if __name__ == "__main__":
    main()
