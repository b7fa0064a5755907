# SPDX-License-Identifier: Apache-2.0
"""python -m headroom: print the pool plan of a model preset.

    python -m headroom --list
    python -m headroom --model Nemotron-H-8B --planner max --buffers 2
    python -m headroom --model Nemotron-3-Nano-30B-A3B --ep 8 --fp8 --planner interval --json
    python -m headroom --trace tests/pool/traces/*.trace        # plan recorded lease traces
"""
from __future__ import annotations

import argparse
import json
import sys

from . import __version__, error, pool

# The planner names, the C++ ones: plan()'s and plan_lifetimes()' (whose by_bytes is, for a preset,
# max with --category by_bytes; headroom.torch.megatron_fsdp.PLANNERS are plan_lifetimes()').
PLANNERS = tuple(dict.fromkeys(pool.planners + pool.lifetime_planners))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m headroom", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"headroom {__version__}")
    ap.add_argument("--list", action="store_true", help="list the model presets and exit")
    ap.add_argument("--model", default="Nemotron-H-8B", help="model preset (see --list); default %(default)s")
    ap.add_argument("--planner", choices=PLANNERS, default=None,
                    help="fixed: Megatron-FSDP's FixedPool; max: its MaxPool as planned (max_dtype_bucket_sizes x "
                         "buffers; at run time Megatron allocates lazily and may hold less); by_bytes: max with "
                         "--category by_bytes; interval: by execution order (training + evaluation). max, by_bytes "
                         "and interval are the planner names of headroom.torch.megatron_fsdp.install(). Default: "
                         "max for presets, interval for --trace")
    ap.add_argument("--buffers", type=int, default=2, help="buffer groups of fixed / max plans; default %(default)s")
    ap.add_argument("--category", choices=("by_dtype", "by_bytes"), default="by_dtype",
                    help="slot typing of fixed / max plans; default %(default)s")
    ap.add_argument("--resident", type=int, default=2,
                    help="units resident together (interval plans: training + evaluation orders); default %(default)s")
    ap.add_argument("--alignment", type=int, default=pool.default_alignment, help="default %(default)s")
    ap.add_argument("--ep", type=int, default=1, help="expert-parallel ranks; default %(default)s")
    ap.add_argument("--fp8", action="store_true", help="fp8 parameters (u8 buckets)")
    ap.add_argument("--grads", metavar="DTYPE", help="plan the gradient pool in this dtype (e.g. float32)")
    ap.add_argument("--units", action="store_true", help="also print every unit's buckets and slots")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON (every offset) instead")
    ap.add_argument("--trace", nargs="+", metavar="FILE",
                    help="plan lease trace files (docs/pool.md, 'The lease trace format') with plan_lifetimes")
    args = ap.parse_args(argv)
    if args.trace:
        return _plan_traces(args)
    args.planner = args.planner or "max"

    if args.list:
        for name in pool.models.names():
            print(name)
        return 0
    try:
        w = pool.model_workload(args.model, args.ep, fp8_params=args.fp8, grad_dtype=args.grads)
        if args.planner == "by_bytes":  # the adapter's name for max with slots shared across dtypes
            args.planner, args.category = "max", "by_bytes"
        if args.planner == "interval":
            p = pool.plan(w, "interval", orders=[pool.training_order(w), pool.evaluation_order(w)],
                          resident=args.resident, alignment=args.alignment)
        else:
            p = pool.plan(w, args.planner, category=args.category, buffers=args.buffers, alignment=args.alignment)
    except (error, TypeError) as e:
        print(f"python -m headroom: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(pool.as_dict(p), sys.stdout, indent=1)
        print()
        return 0
    print(p, end="")
    if args.planner == "interval":
        print(f"  lower bound {pool.lower_bound(w, p.orders, args.resident, args.alignment)} B")
    if args.units:
        print(p.describe_units(), end="")
    return 0


def _plan_traces(args) -> int:
    planner = args.planner or "interval"
    out = []
    for path in args.trace:
        try:
            with open(path, encoding="utf-8") as f:
                p = pool.plan_lifetimes(pool.LeaseTrace.parse(f.read()), alignment=args.alignment, planner=planner)
        except (error, TypeError, OSError) as e:
            print(f"python -m headroom: {path}: {e}", file=sys.stderr)
            return 2
        out.append({"trace": path, "planner": p.planner, "winner": p.winner, "arena_bytes": p.arena_bytes,
                    "bound": p.bound, "ratio_to_bound": p.ratio_to_bound, "candidates": p.candidates,
                    "infeasible": p.infeasible, "fingerprint": p.fingerprint,
                    **({"offsets": {str(b): o for b, o in p.offsets.items()}} if args.json else {})})
        if not args.json:
            print(f"{path}: {p}")
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
