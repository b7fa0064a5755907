#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots peak memory against the micro-batch count for bench_pipeline_retention and its PyTorch
peer (bench/pipeline_retention_torch.py): one panel per pipeline stage and series (a fixed global
batch; a fixed micro-batch, the PyTorch rows belong to the first), one line per retention policy (headroom all / reduced / none, PyTorch return_outputs True / False); headroom's measured
peaks are solid with dots, the memory model's predictions dotted on top.

    python3 bench/pipeline_retention_plot.py [FILE ...] [-o OUT.png]

FILEs are anything holding the benchmarks' JSON lines (tools/gpu-check's summary.txt or
bench.log, or the programs' saved output). Without FILEs it reads $OUT/summary.txt (or
build/gpu/gpu-check/summary.txt) and writes $OUT/pipeline_retention.png (or
docs/img/pipeline_retention.png). When no headroom rows are found it says so and exits 0.
"""
import argparse
import json
import os
import sys
from collections import defaultdict

POLICIES = [  # (key in the JSON, label, style)
    ("all", "headroom all", dict(color="#d62728")),
    ("reduced", "headroom reduced", dict(color="#1f77b4")),
    ("none", "headroom none", dict(color="#2ca02c")),
    ("torch_return_outputs_True", "PyTorch return_outputs=True", dict(color="#ff7f0e", linestyle="--")),
    ("torch_return_outputs_False", "PyTorch return_outputs=False", dict(color="#9467bd", linestyle="--")),
]


def json_objects(path):
    with open(path, errors="replace") as f:
        for line in f:
            start = line.find("{")
            if start < 0:
                continue
            try:
                obj = json.loads(line[start:])
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and obj.get("bench") in ("pipeline_retention", "pipeline_retention_torch"):
                yield obj


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("-o", "--output")
    args = parser.parse_args()
    out_dir = os.environ.get("OUT")
    files = args.files or [os.path.join(out_dir, "summary.txt") if out_dir else "build/gpu/gpu-check/summary.txt"]
    output = args.output or (os.path.join(out_dir, "pipeline_retention.png") if out_dir else "docs/img/pipeline_retention.png")

    measured = defaultdict(dict)   # (series, policy, stage) -> {m: bytes}
    predicted = defaultdict(dict)
    device = None
    for path in files:
        if not os.path.exists(path):
            print(f"pipeline_retention_plot: {path} not found")
            continue
        for obj in json_objects(path):
            if obj.get("status") == "skipped":
                continue
            device = device or obj.get("device")
            for r in obj.get("rows", []):
                key = (r.get("series", "global"), r["policy"], r["stage"])
                measured[key][r["m"]] = r.get("measured", r.get("peak_bytes"))
                if "predicted" in r:
                    predicted[key][r["m"]] = r["predicted"]
    if not any(p in ("all", "reduced", "none") for _, p, _ in measured):
        print("pipeline_retention_plot: no bench_pipeline_retention rows found; nothing to plot")
        return 0
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("pipeline_retention_plot: matplotlib is not installed; nothing plotted")
        return 0

    stages = sorted({s for _, _, s in measured})
    all_series = [x for x in ("global", "microbatch") if any(k[0] == x for k in measured)]
    titles = {"global": "fixed global batch", "microbatch": "fixed micro-batch"}
    fig, axes = plt.subplots(len(all_series), len(stages), figsize=(6 * len(stages), 4.5 * len(all_series)),
                             sharey=False, squeeze=False)
    gib = float(1 << 30)
    for row_axes, name in zip(axes, all_series):
        for ax, stage in zip(row_axes, stages):
            for key, label, style in POLICIES:
                points = measured.get((name, key, stage))
                if not points:
                    continue
                ms = sorted(points)
                ax.plot(ms, [points[m] / gib for m in ms], marker="o", label=label, **style)
                model = predicted.get((name, key, stage))
                if model:
                    pm = sorted(model)
                    ax.plot(pm, [model[m] / gib for m in pm], linestyle=":", color=style["color"], marker="x",
                            label=f"{label} (model)")
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({m for s in measured.values() for m in s}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("micro-batches m")
            ax.set_title(f"{titles[name]}, stage {stage}" + (" (last: LM head)" if stage == stages[-1] else ""))
            ax.set_ylabel("peak allocated memory, GiB")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    fig.suptitle(f"1F1B on 2 GPUs{f' ({device})' if device else ''}: peak memory per stage vs m")
    fig.tight_layout()
    os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
    fig.savefig(output, dpi=120)
    print(f"pipeline_retention_plot: wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
