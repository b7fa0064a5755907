#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
# headroom: stress lanes (tools/gpu-stress --lanes: one process pair on a free port of its own)
# headroom: stress as interval: --variants hybrid-grouped_mm --allocators interval --warmup 2 --iters 2 --replays 2 --port {port} --child-timeout 300 --deadline 360
"""CUDA-graph capture of Megatron-FSDP 0.6.1 over headroom's arena, on transformers' NemotronH.

The model, mesh and ``fully_shard_model`` call are bench/megatron_fsdp_pool_nemotronh.py's
(``model_config``, one FSDP unit per ``NemotronHBlock``, ZeRO-3, ``fsdp_double_buffer=True``,
``maxpool_double_buffer=True``, fp32 main params and grads, bf16 gradient communication), plus
``cuda_graph_mode=True`` (megatron-fsdp 0.6.1: ``zero_grad`` keeps the sharded-gradient references
that a replayed graph writes, param_and_grad_buffer.py ``zero_grad``). Variants (``--variants``):

  dense              pattern "M*M*M*M*" (Mamba2 + attention, no MoE), fp32 weights
  hybrid-eager       the full "MEMEM*EMEMEM*EMEMEM*EMEM", transformers' eager experts loop
                     (nonzero + .item() per expert: expected not to capture)
  hybrid-grouped_mm  the full pattern, experts_implementation="grouped_mm" (histc, sort,
                     torch grouped_mm), bf16 weights (torch's fp32 grouped_mm falls back to a loop
                     that reads the offsets on the host)

Allocators (``--allocators``): ``headroom.torch.megatron_fsdp.install(planner=...)`` for each
planner named; ``PLANNER@nccl``: the same with the arena laid inside a ``torch.cuda.MemPool`` on
ProcessGroupNCCL's allocator (``ncclMemAlloc``) and that pool registered with the group
(``register_mem_pool``) before capture, as bench/megatron_fsdp_pool_dp2.py registers it; and
Megatron's own MaxPool (``megatron_maxpool``) as the control. One process pair per (variant,
allocator), fresh CUDA and NCCL state (a failed capture can leave either unusable).

Per rank, the protocol (docs/torch.md, "CUDA graphs over the arena"; steps 1-5 are
bench/megatron_fsdp_graph_rank.py, the per-rank harness, with the variants and the model):
  1. ``--warmup`` eager forward+backward steps of causal-LM loss on static token ids (different
     per rank), ``zero_grad_buffer()`` before and ``end_step()`` after each: the first step is
     headroom's learning step, ``end_step()`` lays the arena; the later ones run on it;
  2. ``--iters`` eager steps timed with CUDA events, each compared with the one before (a replay
     is only held to what eager repeats); the last one is the reference: its loss and every
     parameter's main-gradient shard (``param.grad`` of Megatron's optimizer parameters, a view
     of its main-gradient buffer) are cloned;
  3. strategy (a): barrier, synchronize, ``torch.cuda.graph(g, stream=<new stream>,
     capture_error_mode=--capture-error-mode)`` around one forward+backward (Megatron-LM's
     FullCudaGraphWrapper recipe), synchronize, barrier; then ``--replays`` replays, each after
     ``zero_grad_buffer()`` (outside the graph), timed with CUDA events: loss and every main-gradient
     shard torch.equal to the reference; then one more eager step, equal too;
  4. fixed addresses: every arena's address, size and plan fingerprint (MaxPool: every fsdp_*
     global buffer's address and size) before capture, after capture and after the replays, and
     the arena leases the capture made (address, size; ``add_lease_listener``) against the eager
     reference step's: all the same;
  5. strategy (b), only when (a) fails: ``torch.cuda.make_graphed_callables`` over the FSDP units;
  6. ``nccl_ub=True`` (parent, no GPU work): what Megatron-FSDP's nccl_ub path imports and
     whether it is importable here; it is not run (see the "blocked:" line it prints).

Prints one line per (variant, allocator, strategy): PASS with the checks and the median step times
(eager, replay, ratio), or FAIL with the exception's type, first line and where it was raised
(the cause, not torch.cuda.graph's "capture invalidated" that follows it); a "blocked: ..." line for every strategy that cannot capture; then one JSON line,
also written to $OUT/megatron_fsdp_graph_nemotronh.json (rewritten after every run, so a run cut
short keeps what it did). Exit 1 when a captured graph's replay is not bit-equal to eager (or
eager steps are not bit-equal to each other) or an address moved; else 2 when a run ended without
a verdict (an error before capture, a crash, --child-timeout: its "ERROR (no verdict)" line and
the run's stderr are printed) or failed after it (a non-zero exit once every rank had written its
verdict: a crash in teardown; its "ERROR after every rank's verdict" line); else 0: strategies that cannot capture are "blocked:" lines, not
failures. "skipped: ..." and 77 without 2 GPUs, torch, transformers' NemotronH, megatron_fsdp or
headroom.

  python3 bench/megatron_fsdp_graph_nemotronh.py [--variants dense,hybrid-grouped_mm,hybrid-eager]
         [--allocators interval,megatron_maxpool] [--seq 512] [--batch 2] [--replays 10]
  python3 bench/megatron_fsdp_graph_nemotronh.py --allocators interval@nccl --variants dense,hybrid-grouped_mm
  python3 bench/megatron_fsdp_graph_nemotronh.py --predict   # CPU: no GPU, no process group
  python3 bench/megatron_fsdp_graph_nemotronh.py --dry-run --hidden 256 --seq 32 --batch 1 \
         --warmup 2 --iters 2 --replays 1 --deadline 1500 --child-timeout 400   # CPU, about 10 min

``--predict`` builds every variant on the meta device, checks its block pattern, runs forward and
backward there (a meta tensor cannot be read on the host: ``.item()``, ``nonzero`` and Python
branches on tensor values raise, which is what a capture rejects), prints headroom's arena
prediction for it (``headroom.torch.megatron_fsdp.predict``) and the nccl_ub import check.
``--dry-run`` runs every (variant, allocator) on CPU (gloo, 2 processes, torch.cuda's stream and
event calls stubbed as in python/tests/adapters/test_megatron_fsdp_run.py) with eager steps
standing in for capture and replays, Megatron-FSDP's coalesced all-gathers run synchronously
(the harness's ``one_gather_at_a_time``): it checks the bench's bookkeeping (leases,
addresses, comparisons, strategy (b)), not CUDA graphs.

Every collective of the process group times out after --collective-timeout seconds; NCCL work
inside a replayed graph is not watched by torch, so each run also has --child-timeout, and the
whole bench stops launching runs after --deadline seconds.

This file is the entry point: the arguments, ``--predict``, step 6, one process pair per run
(``--child``: the harness's ``child``) and the report, from each rank's result file.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from megatron_fsdp_graph_rank import (  # noqa: E402 - the per-rank harness (steps 1-5)
    ATTENTION, SIZE, VARIANTS, attention_context, build_model, check_pattern, child, first_line,
    pin_single_sequence_masks, where)
from megatron_fsdp_pool_nemotronh import MAXPOOL, require_headroom_and_nemotronh, unit_classes  # noqa: E402

SKIP = 77
NAME = "megatron_fsdp_graph_nemotronh"


def skipped(why: str) -> None:
    print(f"skipped: {why}", flush=True)
    sys.exit(SKIP)


def nccl_ub_feasibility() -> dict:
    """What megatron_fsdp 0.6.1's nccl_ub path needs (param_and_grad_buffer.py imports
    megatron.core.nccl_allocator, else apex.contrib.nccl_allocator; asserts one is there when
    nccl_ub=True) and what is importable here."""
    import importlib

    found = {}
    for mod in ("megatron.core.nccl_allocator", "apex.contrib.nccl_allocator"):
        try:
            importlib.import_module(mod)
            found[mod] = "importable"
        except Exception as e:  # noqa: BLE001 - reported
            found[mod] = first_line(e)
    try:
        import megatron_fsdp.param_and_grad_buffer as pgb

        chosen = pgb.NCCL_ALLOCATOR
    except Exception as e:  # noqa: BLE001 - reported
        chosen = f"megatron_fsdp not importable ({first_line(e)})"
    import torch

    ok = any(v == "importable" for v in found.values())
    reasons = []
    if not ok:
        reasons.append("neither megatron.core.nccl_allocator nor apex.contrib.nccl_allocator is importable "
                       "(megatron-core is not installed; PyPI's 'apex' is an unrelated package, NVIDIA apex "
                       "is built from source)")
    reasons.append("megatron.core.nccl_allocator.init() sets NCCL_NVLS_ENABLE=1 and registers the pool "
                   "symmetrically unless disable_symmetric_registration=True; NVLink multicast must stay off on "
                   "the lent machines")
    reasons.append("it JIT-builds its ncclMemAlloc allocator (torch.utils.cpp_extension.load_inline, -lnccl) "
                   "at init: nvcc and nccl.h at run time")
    return {"imports": found, "megatron_fsdp_NCCL_ALLOCATOR": chosen, "torch": torch.__version__,
            "usable": ok, "run": False, "reasons": reasons}


# ---------------------------------------------------------------------------------------------
# --predict (CPU)


def predict(args) -> int:
    import torch

    pin_single_sequence_masks()
    rows = []
    for variant in args.variants.split(","):
        v = VARIANTS[variant]
        model, impl = build_model(variant, args.seq, "meta", args.hidden, args.experts, args.attention,
                                  args.kv_heads)
        check_pattern(model, v["pattern"])
        n_blocks = sum(isinstance(m, tuple(unit_classes())) for m in model.modules())
        ids = torch.zeros(args.batch, args.seq, dtype=torch.long, device="meta")
        try:
            with attention_context(args.attention):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            host = "none (forward+backward ran on the meta device)"
            capturable = True
        except Exception as e:  # noqa: BLE001 - the prediction
            host = f"{first_line(e)[:160]} at {where(e)}"
            capturable = False
        row = {"variant": variant, "pattern": v["pattern"], "experts_implementation": impl, "dtype": v["dtype"],
               "blocks": n_blocks, "host_reads": host, "predicted_capturable": capturable}
        try:
            from headroom.torch import megatron_fsdp as hm

            p = hm.predict(model, unit_classes(), grad_comm_dtype=torch.bfloat16, dp=args.world_size)
            row["arena_MiB"] = {pool: {k: round(r[k] / 2**20, 2) for k in ("megatron_planned", "interval", "bound")}
                                for pool, r in p.items()}
        except ImportError as e:
            row["arena_MiB"] = f"not predicted: {first_line(e)}"
        rows.append(row)
        print(f"{variant:18s} pattern {v['pattern']} ({n_blocks} blocks checked), experts {impl}, "
              f"{v['dtype']}: host reads in forward+backward: {host}", flush=True)
        if isinstance(row["arena_MiB"], dict):
            print(f"{'':18s} arena MiB " + "; ".join(f"{pool}: " + ", ".join(f"{k} {x}" for k, x in r.items())
                                                      for pool, r in row["arena_MiB"].items()), flush=True)
    ub = nccl_ub_feasibility()
    print(f"nccl_ub: megatron_fsdp picks {ub['megatron_fsdp_NCCL_ALLOCATOR']}; " +
          "; ".join(f"{k}: {v}" for k, v in ub["imports"].items()), flush=True)
    print(json.dumps({"bench": NAME, "mode": "predict", "variants": rows, "nccl_ub": ub}, default=str), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# the parent


def lines_of(run: dict) -> tuple:
    """(printed lines, blocked lines, verdict) for one (variant, allocator); verdict: "ok",
    "mismatch" (a replay or an eager repeat not bit-equal, an address moved) or "error" (no verdict)."""
    tag = f"{run['variant']}/{run['allocator']}"
    ranks = run.get("ranks") or []
    if run.get("error") or not ranks or any(r.get("error") for r in ranks):
        why = run.get("error") or next((r["error"] for r in ranks if r.get("error")), "no rank result")
        return [f"{tag}: ERROR (no verdict) {why.splitlines()[0]}"], [], "error"
    out, blocked, bad = [], [], "ok"
    if ranks[0].get("pattern_check", "ok") != "ok":
        out.append(f"{tag}: note: {ranks[0]['pattern_check']}")
    impl = ranks[0].get("experts_implementation") if "E" in VARIANTS[run["variant"]]["pattern"] else None
    if not all(r.get("eager_repeats", True) for r in ranks):
        first = next((c for r in ranks for c in r.get("eager_repeat_checks", [])
                      if not (c["loss_equal"] and c["grads_equal"])), None)
        out.append(f"{tag}: MISMATCH eager steps on the same inputs are not bit-equal to each other ({first}): "
                   "replay equality is not meaningful here")
        bad = "mismatch"
    for key in ("a", "b"):
        per = [r["strategies"].get(key) for r in ranks]
        if not any(per):
            continue
        s = next(p for p in per if p)
        if all(p and p.get("status") == "PASS" for p in per):
            ok = {k: all(p[k] for p in per) for k in ("loss_equal", "grads_equal", "eager_after_replay_equal",
                                                       "addresses_fixed")}
            lease_ok = [p["capture_leases_at_eager_addresses"] for p in per]
            eager = max(p["eager_median_ms"] for p in per)
            replay = max(p["replay_median_ms"] for p in per)
            yn = lambda x: "Y" if x else "N"  # noqa: E731
            out.append(f"{tag} ({key}) {s['what']}: PASS"
                       + (" (DRY RUN: eager steps stood in for capture and replays)" if per[0].get("dry_run") else "")
                       + f"; {per[0]['replays']} replays on {len(per)} ranks: loss "
                       f"bit-equal {yn(ok['loss_equal'])}, {per[0]['grads']} parameters' main-grad shards bit-equal "
                       f"{yn(ok['grads_equal'])}, eager after replay {yn(ok['eager_after_replay_equal'])}, "
                       f"buffers at fixed addresses {yn(ok['addresses_fixed'])}"
                       + ("" if lease_ok[0] is None else f", capture leases at the eager step's addresses "
                          f"{yn(all(lease_ok))} ({per[0]['leases']} leases)")
                       + ("" if not ranks[0].get("nccl_pool") else
                          f", every arena inside the registered NCCL pool "
                          f"{yn(all(all(r['nccl_pool']['arenas_inside']) for r in ranks))} "
                          f"({ranks[0]['nccl_pool']['segments']} segments)")
                       + f"; median step eager {eager:.2f} ms, replay {replay:.2f} ms (x{replay / eager:.3f})")
            if not all(ok.values()) or (lease_ok[0] is not None and not all(lease_ok)):
                bad = "mismatch"
                first = next((p["first_bad"] for p in per if p.get("first_bad")), None)
                out.append(f"{tag} ({key}) MISMATCH: {first or ok}")
        else:
            fails = [p for p in per if p and p.get("status") != "PASS"]
            f = fails[0] if fails else s
            out.append(f"{tag} ({key}) {s['what']}: {f.get('status', 'FAIL')} {f.get('error', '')} "
                       f"[at {f.get('where', '?')}]" + (f" (experts {impl})" if impl else ""))
            blocked.append(f"blocked: {tag} ({key}) {s['what']}: {f.get('error', '')} at {f.get('where', '?')}")
    return out, blocked, bad


def child_outcome(rc, stderr: str, ranks: list, world: int, limit: int) -> dict:
    """{"error": ..., "teardown": ...} of one child run from its exit (None: killed at `limit`) and
    the verdict files its ranks wrote. A non-zero exit after every rank wrote its verdict (a crash
    in teardown, say) keeps the verdict and is reported as "teardown"."""
    if rc is None:
        return {"error": f"no verdict within {limit} s (--child-timeout / --deadline; its processes killed)",
                "teardown": None}
    if rc == 0:
        return {"error": None, "teardown": None}
    why = f"exit {rc}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}"
    return {"error": None, "teardown": why} if len(ranks) == world else {"error": why, "teardown": None}


def judged(run: dict) -> tuple:
    """lines_of(run), with a failure after the verdict (run["teardown"]) as an error of its own."""
    printed, blocked, bad = lines_of(run)
    if run.get("teardown"):
        printed.append(f"{run['variant']}/{run['allocator']}: ERROR after every rank's verdict: {run['teardown']}")
        bad = "mismatch" if bad == "mismatch" else "error"
    return printed, blocked, bad


def launch(cmd, timeout: int) -> tuple:
    """Runs `cmd` in its own session; past `timeout` seconds kills the session (the spawned ranks
    too). Returns (exit code or None when killed, stderr)."""
    import signal

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        return proc.returncode, stderr
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = proc.communicate()
        return None, stderr or ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="dense,hybrid-grouped_mm,hybrid-eager")
    ap.add_argument("--allocators", default="interval,megatron_maxpool",
                    help="headroom planners (max, by_bytes, interval; PLANNER@nccl: the arena in a MemPool on "
                         "ProcessGroupNCCL's allocator, registered with the group) and/or megatron_maxpool")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=SIZE["hidden"])
    ap.add_argument("--experts", type=int, default=SIZE["experts"])
    ap.add_argument("--kv-heads", type=int, default=None,
                    help="key/value heads of the attention blocks (default: the config's 2, grouped-query "
                         "attention with 4 query heads a group at hidden 1024)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3, help="eager steps before timing (>= 2: learn, then arena)")
    ap.add_argument("--iters", type=int, default=5,
                    help="timed eager steps, each compared with the one before; the last is the reference")
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--capture-error-mode", default="thread_local", choices=("thread_local", "global", "relaxed"))
    ap.add_argument("--attention", default="sdpa-math", choices=ATTENTION,
                    help="sdpa-math: transformers' sdpa attention with torch's math backend "
                         "(sdpa_kernel(SDPBackend.MATH) around each forward); sdpa: torch's choice of backend "
                         "(1x H200, 2026-11-29, with the masks pinned: replays bit-equal too); eager: "
                         "transformers' eager attention (its mask is a host-to-device copy: not capturable)")
    ap.add_argument("--gqa", default="sdpa", choices=("sdpa", "expand"),
                    help="grouped-query attention: sdpa: as transformers calls SDPA (enable_gqa=True with no "
                         "mask; the masks pinned to eager's in both modes); expand: the key/value heads "
                         "repeated to the query heads before SDPA (enable_gqa=False)")
    ap.add_argument("--stream", default="side", choices=("side", "default"),
                    help="side: each rank builds, shards and runs its eager steps on one stream of its own "
                         "(autograd keeps the stream a parameter's gradient node was made on, and a capture "
                         "cannot join the legacy default stream); default: on the default stream")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--port", type=int, default=29871)
    ap.add_argument("--collective-timeout", type=int, default=60, help="seconds, every collective")
    ap.add_argument("--child-timeout", type=int, default=100, help="seconds, one (variant, allocator) run")
    ap.add_argument("--deadline", type=int, default=190,
                    help="seconds for the whole bench: a run gets at most what is left, none starts with < 20 s left")
    ap.add_argument("--predict", action="store_true", help="CPU: meta-device forward+backward, arena prediction")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU, gloo, torch.cuda stubbed: the whole protocol with eager steps standing in for "
                         "capture and replay (checks the bench, not CUDA graphs)")
    ap.add_argument("--child")
    ap.add_argument("--variant")
    ap.add_argument("--allocator")
    ap.add_argument("--result")
    args = ap.parse_args()
    for v in args.variants.split(","):
        if v not in VARIANTS:
            ap.error(f"--variants: {v!r}; expected some of {', '.join(VARIANTS)}")
    for a in args.allocators.split(","):
        if a.endswith("@nccl") and args.dry_run:
            ap.error(f"--allocators {a}: @nccl needs NCCL (not --dry-run)")
    if args.warmup < 2:
        ap.error(f"--warmup {args.warmup}: expected >= 2 (headroom learns on step 0 and lays its arena after it)")
    if args.iters < 2 or args.replays < 1:
        ap.error(f"--iters {args.iters} / --replays {args.replays}: expected >= 2 / >= 1")
    heads = args.hidden // 128  # model_config's attention heads (head_dim 128)
    if args.kv_heads is not None and not (1 <= args.kv_heads <= heads and heads % args.kv_heads == 0):
        ap.error(f"--kv-heads {args.kv_heads}: expected a divisor of the {heads} attention heads of --hidden {args.hidden}")
    if args.child:  # one (variant, allocator) run; the parent checked the environment
        child(args)
        return 0
    try:
        import torch
    except ImportError as e:
        skipped(f"torch is not importable ({e})")
    require_headroom_and_nemotronh(skipped)
    from headroom.pool import lifetime_planners  # the planner names, from the C++

    for a in args.allocators.split(","):
        if a.partition("@")[0] not in lifetime_planners and a != MAXPOOL or a.partition("@")[2] not in ("", "nccl"):
            ap.error(f"--allocators: {a!r}; expected some of {', '.join(lifetime_planners)} (each optionally with "
                     f"@nccl: the arena in a registered ProcessGroupNCCL pool), {MAXPOOL}")
    if args.predict:
        return predict(args)
    if not args.dry_run and (not torch.cuda.is_available() or torch.cuda.device_count() < args.world_size):
        skipped(f"needs {args.world_size} CUDA GPUs; {torch.cuda.device_count() if torch.cuda.is_available() else 0} here")
    try:
        import megatron_fsdp  # noqa: F401
    except ImportError as e:
        skipped(f"megatron_fsdp is not importable ({e}); pip install --no-deps megatron_fsdp-0.6.1-py3-none-any.whl")

    from megatron_fsdp.package_info import __version__ as mfsdp_version

    start = time.monotonic()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix=f"{NAME}."))
    out.mkdir(parents=True, exist_ok=True)
    ub = nccl_ub_feasibility()
    summary = {"bench": NAME, "date": time.strftime("%Y-%m-%d", time.gmtime()), "torch": torch.__version__,
               "megatron_fsdp": mfsdp_version, "device": "cpu (dry run)" if args.dry_run else torch.cuda.get_device_name(0),
               "world_size": args.world_size, "seq": args.seq, "batch": args.batch,
               "hidden": args.hidden, "experts": args.experts, "kv_heads": args.kv_heads,
               "capture_error_mode": args.capture_error_mode, "stream": args.stream, "attention": args.attention, "gqa": args.gqa, "variants": {k: VARIANTS[k] for k in args.variants.split(",")},
               "runs": [], "blocked": [], "nccl_ub": ub, "not_run": []}
    print(f"NemotronH under Megatron-FSDP {mfsdp_version} (cuda_graph_mode=True), dp = {args.world_size}, "
          f"{summary['device']}, torch {torch.__version__}, seq {args.seq} x batch {args.batch}, {summary['date']}",
          flush=True)
    verdicts = set()
    port = args.port
    for alloc in args.allocators.split(","):  # every variant on the first allocator first
        for variant in args.variants.split(","):
            left = args.deadline - (time.monotonic() - start)
            if left < 20:
                summary["not_run"].append(f"{variant}/{alloc}")
                print(f"{variant}/{alloc}: not run (--deadline {args.deadline} s: {left:.0f} s left)", flush=True)
                continue
            path = out / f"graph.{variant}.{alloc}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "1", "--variant", variant,
                   "--allocator", alloc, "--result", str(path), "--world-size", str(args.world_size),
                   "--port", str(port), "--seq", str(args.seq), "--batch", str(args.batch),
                   "--hidden", str(args.hidden), "--experts", str(args.experts),
                   *(["--kv-heads", str(args.kv_heads)] if args.kv_heads is not None else []),
                   "--warmup", str(args.warmup), "--iters", str(args.iters), "--replays", str(args.replays),
                   "--capture-error-mode", args.capture_error_mode, "--stream", args.stream, "--attention", args.attention, "--gqa", args.gqa,
                   "--collective-timeout", str(args.collective_timeout)] + (["--dry-run"] if args.dry_run else [])
            port += 1
            t0 = time.monotonic()
            limit = int(min(args.child_timeout, left))
            rc, stderr = launch(cmd, limit)
            ranks = []
            for r in range(args.world_size):
                f = Path(f"{path}.rank{r}")
                if f.exists():
                    ranks.append(json.loads(f.read_text()))
            run = {"variant": variant, "allocator": alloc, **child_outcome(rc, stderr, ranks, args.world_size, limit),
                   "stderr_tail": stderr[-4000:], "ranks": ranks, "seconds": round(time.monotonic() - t0, 1)}
            printed, blocked, run_bad = judged(run)
            if run_bad != "ok" and run.get("stderr_tail"):
                print(run["stderr_tail"][-3000:], flush=True)
            for line in printed + blocked:
                print(line, flush=True)
            verdicts.add(run_bad)
            summary["runs"].append(run)
            summary["blocked"] += blocked
            (out / f"{NAME}.json").write_text(json.dumps(summary, default=str, indent=1))
    ub_line = (f"blocked: nccl_ub=True not run: megatron_fsdp's nccl_ub path needs megatron.core.nccl_allocator or "
               f"apex.contrib.nccl_allocator ({'; '.join(f'{k}: {v}' for k, v in ub['imports'].items())}); "
               + "; ".join(ub["reasons"][1:]))
    print(ub_line, flush=True)
    summary["blocked"].append(ub_line)
    summary["exit"] = 1 if "mismatch" in verdicts else 2 if "error" in verdicts else 0
    (out / f"{NAME}.json").write_text(json.dumps(summary, default=str, indent=1))
    compact = {"bench": NAME, "device": summary["device"], "torch": summary["torch"], "exit": summary["exit"],
               "runs": [{"variant": r["variant"], "allocator": r["allocator"], "error": r.get("error"),
                         "experts": (r["ranks"][0].get("experts_implementation") if r.get("ranks") else None),
                         "strategies": {k: {x: s.get(x) for x in ("status", "error", "where", "loss_equal", "grads_equal",
                                                                 "addresses_fixed", "capture_leases_at_eager_addresses",
                                                                 "eager_median_ms", "replay_median_ms")}
                                        for k, s in (r["ranks"][0]["strategies"].items() if r.get("ranks") else [])}}
                        for r in summary["runs"]],
               "blocked": summary["blocked"], "not_run": summary["not_run"]}
    print(json.dumps(compact, default=str), flush=True)
    print(f"wrote {out / (NAME + '.json')}", flush=True)
    return summary["exit"]


if __name__ == "__main__":
    sys.exit(main())
