#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Renders memory_viz snapshots to PNG in the style of the viewer's Active Memory Timeline.

    python3 bench/trace_pictures.py [DIR] [--png-dir PNG_DIR]

DIR: the snapshots bench_trace_pictures wrote (default $OUT/trace_snapshots, else
./trace_snapshots). PNG_DIR: default $OUT/trace_png, else DIR/png.

The layout follows MemoryViz.js's process_alloc_data: x is the index of the alloc / free
event, each allocation is a band stacked on those allocated before it, a freed band leaves and
the bands above slide down over 3 steps; blocks live before the trace ("initially allocated")
sit at the bottom; colours are the d3 Tableau10 palette indexed by category. Writes one PNG per
snapshot, and for rank dp0 the pairs side by side on one scale:
    trace_forum.png   forum_deferred vs forum_stream_ordered
    trace_cp.png      cp_full vs cp_none
"""
import os
import pickle
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "trace"))
import check_snapshot  # noqa: E402  (the viewer's free_requested/free_completed merge)

TABLEAU10 = ["#4e79a7", "#f28e2c", "#e15759", "#76b7b2", "#59a14f",
             "#edc949", "#af7aa1", "#ff9da7", "#9c755f", "#bab0ab"]


def human(n):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def annotate(snap):
    """The viewer's annotate_snapshot: merged frees, categories in order of first appearance."""
    categories, traces = [], []
    for trace in snap["device_traces"]:
        out = check_snapshot.merged_trace(trace)
        for e in out:
            if "category" in e and e["category"] not in categories:
                categories.append(e["category"])
        traces.append(out)
    if categories and "unknown" not in categories:
        categories.append("unknown")
    return traces, categories


def alloc_data(snap, device, trace, categories):
    """process_alloc_data (plot_segments = false): polygons as (timesteps, offsets, size, color)."""
    elements, initially, actions, addr_to = [], [], [], {}
    for e in trace:
        if e["action"] == "alloc":
            elements.append(e)
            addr_to[e["addr"]] = len(elements) - 1
            actions.append(len(elements) - 1)
        elif e["action"] in ("free", "free_completed"):
            if e["addr"] in addr_to:
                actions.append(addr_to.pop(e["addr"]))
            else:
                elements.append(e)
                initially.append(len(elements) - 1)
                actions.append(len(elements) - 1)
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in addr_to:
                elements.append({"action": "alloc", "addr": addr, "size": b.get("requested_size") or b["size"]})
                initially.append(len(elements) - 1)
            addr += b["size"]
    initially.reverse()
    if not actions and initially:
        actions.append(initially.pop())

    current, current_data, data = [], [], []
    total, t, peak = 0, 0, 0

    def add(elem):
        nonlocal total
        e = elements[elem]
        color = categories.index(e.get("category", "unknown")) if categories else elem
        d = {"t": [t], "off": [total], "size": e["size"], "color": color}
        current.append(elem)
        current_data.append(d)
        data.append(d)
        total += e["size"]

    for elem in initially:
        add(elem)
    for elem in actions:
        size = elements[elem]["size"]
        if elem not in current:
            add(elem)
            t += 1
        else:
            idx = len(current) - 1 - current[::-1].index(elem)
            t += 1
            removed = current_data[idx]
            removed["t"].append(t)
            removed["off"].append(removed["off"][-1])
            del current[idx]
            del current_data[idx]
            if idx < len(current):
                for d in current_data[idx:]:
                    d["t"] += [t, t + 3]
                    d["off"] += [d["off"][-1], d["off"][-1] - size]
                t += 3
            total -= size
        peak = max(peak, total)
    for d in current_data:
        d["t"].append(t)
        d["off"].append(d["off"][-1])
    return data, max(peak, total), max(t, 1)


def draw(ax, path, ymax=None):
    from matplotlib.collections import PolyCollection
    with open(path, "rb") as f:
        snap = pickle.load(f)
    traces, categories = annotate(snap)
    device = next((i for i, t in enumerate(traces) if t), 0)
    data, peak, steps = alloc_data(snap, device, traces[device] if traces else [], categories)
    polys, colors = [], []
    for d in data:
        bottom = list(zip(d["t"], d["off"]))
        top = [(x, o + d["size"]) for x, o in zip(d["t"], d["off"])][::-1]
        polys.append(bottom + top)
        colors.append(TABLEAU10[d["color"] % len(TABLEAU10)])
    ax.add_collection(PolyCollection(polys, facecolors=colors, edgecolors="none"))
    ax.set_xlim(0, steps)
    ax.set_ylim(0, (ymax or peak or 1) * 1.05)
    ax.yaxis.set_major_formatter(lambda v, _p: human(v))
    ax.set_xlabel("alloc / free event")
    ax.set_title(f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)}\npeak {human(peak)}",
                 fontsize=9)
    for i, c in enumerate(categories):
        ax.plot([], [], color=TABLEAU10[i % len(TABLEAU10)], linewidth=8, label=c)
    if categories:
        ax.legend(loc="upper left", fontsize=8, frameon=False)
    return peak


def main(argv):
    out = os.environ.get("OUT")
    args = [a for a in argv if not a.startswith("--")]
    src = args[0] if args else (os.path.join(out, "trace_snapshots") if out else "trace_snapshots")
    png_dir = None
    if "--png-dir" in argv:
        png_dir = argv[argv.index("--png-dir") + 1]
        args = [a for a in args if a != png_dir]
    png_dir = png_dir or (os.path.join(out, "trace_png") if out else os.path.join(src, "png"))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("trace_pictures.py: matplotlib is needed (pip install matplotlib)")
        return 1
    files = sorted(os.path.join(r, n) for r, _d, ns in os.walk(src) for n in ns if n.endswith(".pickle"))
    if not files:
        print(f"trace_pictures.py: no snapshots in {src}; run bench_trace_pictures first")
        return 1
    os.makedirs(png_dir, exist_ok=True)
    written = []
    for path in files:
        fig, ax = plt.subplots(figsize=(10, 5.6))
        draw(ax, path)
        name = os.path.basename(os.path.dirname(path)) + "." + os.path.basename(path)[:-len(".pickle")] + ".png"
        fig.tight_layout()
        fig.savefig(os.path.join(png_dir, name), dpi=110)
        plt.close(fig)
        written.append(name)
    pairs = {"trace_forum.png": ("forum_deferred", "forum_stream_ordered"), "trace_cp.png": ("cp_full", "cp_none")}
    for name, cases in pairs.items():
        paths = []
        for case in cases:
            found = [p for p in files if os.path.basename(os.path.dirname(p)) == case and ".dp0." in p]
            paths += found[:1]
        if len(paths) != 2:
            continue
        peaks = []
        fig, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
        for ax, p in zip(axes, paths):
            peaks.append(draw(ax, p))
        for ax in axes:
            ax.set_ylim(0, max(peaks) * 1.05)
        fig.tight_layout()
        fig.savefig(os.path.join(png_dir, name), dpi=110)
        plt.close(fig)
        written.append(name)
        print(f"{name}: {cases[0]} peak {human(peaks[0])}, {cases[1]} peak {human(peaks[1])}")
    print(f"{len(written)} PNG(s) in {png_dir}: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
