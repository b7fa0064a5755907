#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch's own memory_viz tools on headroom's snapshots (run on the GPU machine).

    python3 bench/trace_viz_check.py [DIR...]

DIRs: default $OUT/trace_snapshots (bench_trace_pictures' files) and, when present,
<build>/trace_snapshots (the host test's files; <build> = $HEADROOM_BUILD_DIR or build/gpu).
At least one snapshot from bench_trace_pictures (a forum_* or cp_* folder) must be found.

For every snapshot:
  1. tests/trace/check_snapshot.py's checks (protocol <= 4 with the viewer's opcodes, structure,
     timeline and segment-history replays);
  2. torch.cuda._memory_viz renders it: trace_plot (Active Memory Timeline), trace_plot with
     plot_segments=True (Active Cached Segment Timeline), segment_plot (Allocator State
     History), and the text consumers segsum and trace; the HTML goes to $OUT/trace_viz/.
  3. tests/trace/viewer_check.py: the file in PyTorch's MemoryViz.js in headless Chromium, all
     three views, every Allocator State History event clicked, no JS error, no block drawn as
     pending-free that was not (skipped, and said so, without the viewer copy or chromium).
Then a real snapshot: torch.cuda.memory._record_memory_history, a few allocations,
torch.cuda.memory._snapshot(), dumped with protocol 4 and passed through the same checker, so
the checker is shown to accept what PyTorch itself writes.
Prints one line per snapshot, then one JSON line; exit status 1 on any failure.
"""
import json
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "trace"))
import check_snapshot  # noqa: E402
import viewer_check  # noqa: E402


def snapshot_dirs(argv):
    if argv:
        return argv
    out = os.environ.get("OUT")
    build = os.environ.get("HEADROOM_BUILD_DIR", os.path.join(HERE, "..", "build", "gpu"))
    dirs = [os.path.join(out, "trace_snapshots") if out else "trace_snapshots", os.path.join(build, "trace_snapshots")]
    return [d for d in dirs if os.path.isdir(d)]


def main(argv):
    try:
        import torch
        from torch.cuda import _memory_viz as viz
    except ImportError as ex:
        print(f"trace_viz_check.py: PyTorch is needed ({ex})")
        return 1
    out = os.environ.get("OUT") or "."
    html_dir = os.path.join(out, "trace_viz")
    os.makedirs(html_dir, exist_ok=True)
    dirs = snapshot_dirs(argv)
    files = sorted(os.path.join(r, n) for d in dirs for r, _s, ns in os.walk(d) for n in ns if n.endswith(".pickle"))
    from_gpu = [f for f in files if os.path.basename(os.path.dirname(f)).startswith(("forum_", "cp_"))]
    failures, results = [], []
    if not from_gpu:
        if torch.cuda.device_count() >= 2:
            failures.append(f"no snapshots of bench_trace_pictures (forum_*/cp_* folders) in {dirs}")
        else:  # bench_trace_pictures needs 2 GPUs and was skipped: check what the host tests wrote
            print(f"skipped: bench_trace_pictures' snapshots (it needs 2 GPUs, this machine shows "
                  f"{torch.cuda.device_count()}); checking the host tests' snapshots only")
    for path in files:
        name = os.path.relpath(path, os.path.commonpath(dirs) if len(dirs) > 1 else dirs[0]).replace(os.sep, ".")
        try:
            snap, version = check_snapshot.check_file(path)
            views = {"timeline": viz.trace_plot(snap), "segments_timeline": viz.trace_plot(snap, plot_segments=True),
                     "state_history": viz.segment_plot(snap)}
            for view, html in views.items():
                if not (isinstance(html, str) and "add_local_files" in html and len(html) > 500):
                    raise RuntimeError(f"{view}: no viewer page produced")
                with open(os.path.join(html_dir, f"{name}.{view}.html"), "w") as f:
                    f.write(html)
            text = viz.segsum(snap) + viz.trace(snap)
            results.append({"file": name, "protocol": version, "events": sum(len(t) for t in snap["device_traces"]),
                            "segments": len(snap["segments"]), "text_chars": len(text)})
            print(f"ok   {name}: protocol {version}, rendered trace_plot x2 + segment_plot, segsum/trace text")
        except Exception as ex:  # noqa: BLE001 -- reported and counted
            failures.append(f"{name}: {type(ex).__name__}: {ex}")
            print(f"FAIL {name}: {type(ex).__name__}: {ex}")

    viewer = "not run: no snapshots"
    if files:
        rc = viewer_check.main(files)
        viewer = {0: "passed", viewer_check.SKIP: "skipped"}.get(rc, "FAILED")
        if rc not in (0, viewer_check.SKIP):
            failures.append("viewer_check.py: a snapshot fails in PyTorch's viewer (see above)")

    torch_ok = False
    if torch.cuda.is_available():
        try:
            torch.cuda.memory._record_memory_history(max_entries=10000)
            keep = [torch.empty(1 << 20, device="cuda") for _ in range(4)]
            temp = torch.empty(3 << 20, device="cuda")
            del temp
            keep.append(torch.empty(1 << 22, device="cuda"))
            torch.cuda.synchronize()
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            path = os.path.join(html_dir, "torch_snapshot.pickle")
            with open(path, "wb") as f:
                pickle.dump(snap, f, protocol=4)
            check_snapshot.check_file(path)
            del keep
            torch_ok = True
            print(f"ok   torch._snapshot (torch {torch.__version__}): passes the checker")
        except Exception as ex:  # noqa: BLE001
            failures.append(f"torch snapshot: {type(ex).__name__}: {ex}")
            print(f"FAIL torch snapshot: {type(ex).__name__}: {ex}")
    else:
        failures.append("torch.cuda is not available: no real snapshot to round-trip")
    for f in failures:
        print(f"failure: {f}")
    print(json.dumps({"bench": "trace_viz_check", "torch": torch.__version__, "snapshots": len(files),
                      "from_gpu_program": len(from_gpu), "rendered": len(results), "viewer_check": viewer, "torch_snapshot_ok": torch_ok,
                      "failures": len(failures), "html_dir": html_dir}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
