#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Megatron-FSDP's double buffers under Megatron's MaxPoolAllocator and under headroom's
PoolAllocator (headroom.torch.megatron_fsdp, planners max, by_bytes, interval), on the real
package: one small hybrid model whose FSDP units repeat heavy, light, light (H,L,L,H,L,L,...;
with two buffers used in turn, heavy units land in both of MaxPool's buffers, so MaxPool holds
two heavy slots where one heavy and one light unit are ever alive together; strict H,L
alternation would put every heavy unit in one buffer and MaxPool would waste nothing), fully_shard'ed with fsdp_double_buffer=True, trained for --steps
steps with each allocator, each in its own process (fresh CUDA state, peak statistics and
Megatron's global buffers).

Checks, printed as a table and written to $OUT/megatron_fsdp_pool.json (+ .png):
  * loss curves bit-equal to the MaxPool run (same seeds, deterministic kernels);
  * every headroom arena equals its plan's bytes (one tensor per allocator);
  * torch.cuda.max_memory_allocated (steps >= 2) lower under interval by the planned amount:
    (MaxPool's slot bytes) - (interval arena bytes), within CUDA's 512-byte rounding per block;
  * step time (median of steps >= 2) against MaxPool's;
  * an arena allocated inside torch.cuda.use_mem_pool (as Megatron passes its NCCL pool
    context) is one segment of that pool, holding every slot.
A last process repeats the interval run under headroom.torch.profile.MemoryProfiler (steps 0 =
learning and 3 = planned): its snapshots go to $OUT/snapshots, torch.cuda._memory_viz renders
them to HTML and this script draws their active-memory timeline to a PNG (world size 1 only).

World size 1 (a one-rank NCCL group, NVLS off): Megatron then keeps un-sharded weights in place
and draws on the double-buffer pools for the gradient communication buckets, which it needs
because grad_comm_dtype (bf16) differs from the main gradients (fp32). --world-size N (N GPUs)
shards the weights too, so the parameter pools are exercised as well. With N > 1 (outputs named
megatron_fsdp_pool_dpN.*; bench/megatron_fsdp_pool_dp2.py runs N = 2 in tools/gpu-check) also:
  * real sharding: on every rank every weight and main-gradient buffer of Megatron is
    data-distributed, its local shard smaller than the unit and the N shards covering it;
  * plan agreement: on every rank, every headroom arena was allocated after its plan's
    fingerprint was compared across a data-parallel group of N ranks (PoolAllocator's
    all_gather_object), and the fingerprints are the same on every rank;
  * NCCL registration: an arena allocated by a PoolAllocator inside torch.cuda.use_mem_pool of a
    pool on the NCCL backend's allocator is one segment of that pool on every rank, registered
    with the process group once (ProcessGroupNCCL.register_mem_pool), still one segment at the
    same address after allocate / free of every bucket, and an all_reduce on a slot view is right
    (a last N-process child, in place of the profiler run).

  python3 bench/megatron_fsdp_pool.py [--steps 24] [--hidden 2048] [--layers 8] [--world-size 1]
  python3 bench/megatron_fsdp_pool.py --plan-only      # CPU: the model's plans, no training

Needs: CUDA, torch, megatron_fsdp (pip install --no-deps megatron_fsdp-0.6.1-py3-none-any.whl;
it imports packaging), and headroom's Python package (pip install ., or a build with
HEADROOM_ENABLE_PYTHON=ON: a _core*.so under build/ is found). Skips with a message otherwise.
"""
import argparse
import gc
import importlib.util
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

ROOT = Path(__file__).resolve().parents[1]
RUNS = ["megatron_maxpool", "max", "by_bytes", "interval"]


def skip(why: str) -> None:
    print(f"SKIP megatron_fsdp_pool: {why}")
    sys.exit(0)


def require_gpus_and_megatron(world_size: int) -> None:
    """Skips (exit 0, a message) without torch, CUDA, `world_size` GPUs or megatron_fsdp."""
    try:
        import torch
    except ImportError:
        skip("torch is not installed")
    if not torch.cuda.is_available():
        skip("no CUDA device")
    if torch.cuda.device_count() < world_size:
        skip(f"--world-size {world_size} needs {world_size} GPUs; {torch.cuda.device_count()} here")
    try:
        import megatron_fsdp  # noqa: F401
    except ImportError as e:
        skip(f"megatron_fsdp is not importable ({e}); pip install --no-deps megatron_fsdp-0.6.1-py3-none-any.whl")


def import_headroom():
    """headroom installed, else the repository's python/headroom with a _core built under build/."""
    try:
        import headroom  # noqa: F401

        return True
    except ImportError:
        pass
    cores = sorted(ROOT.glob("build/**/_core*.so"), key=lambda p: p.stat().st_mtime, reverse=True)
    if not cores:
        return False
    pkg = ROOT / "python" / "headroom"
    spec = importlib.util.spec_from_file_location(
        "headroom", pkg / "__init__.py", submodule_search_locations=[str(pkg), str(cores[0].parent)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["headroom"] = module
    try:
        spec.loader.exec_module(module)
    except ImportError:
        del sys.modules["headroom"]
        return False
    return True


# ---------------------------------------------------------------------------------------------
# the model: FSDP units H,L,L,H,L,L,... of heavy (an MLP, 8 h^2 parameters) and light (norm + h x h/4)


def model_classes():
    import torch

    class Heavy(torch.nn.Module):
        def __init__(self, h):
            super().__init__()
            self.up = torch.nn.Linear(h, 4 * h)
            self.down = torch.nn.Linear(4 * h, h)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(x)))

    class Light(torch.nn.Module):
        def __init__(self, h):
            super().__init__()
            self.norm = torch.nn.LayerNorm(h)
            self.proj = torch.nn.Linear(h, h // 4)
            self.back = torch.nn.Linear(h // 4, h, bias=False)

        def forward(self, x):
            return x + self.back(self.proj(self.norm(x)))

    return Heavy, Light


def build_model(hidden, layers, device):
    import torch

    Heavy, Light = model_classes()
    torch.manual_seed(1234)
    blocks = [Heavy(hidden) if i % 3 == 0 else Light(hidden) for i in range(layers)]
    return torch.nn.Sequential(*blocks).to(device), [Heavy, Light]


# ---------------------------------------------------------------------------------------------
# --plan-only: what each planner makes of this model's parameter groups (runs on CPU)


def plan_only(args) -> None:
    import torch

    try:
        import megatron_fsdp.param_and_grad_buffer as pgb
    except ImportError as e:
        skip(f"megatron_fsdp is not importable ({e})")
    if not import_headroom():
        skip("headroom's Python package is not importable")
    from headroom.torch import megatron_fsdp as hm

    with torch.device("meta"):
        model, units = build_model(args.hidden, args.layers, "meta")
    policy = pgb.BucketingPolicy(fsdp_unit_modules=units, data_parallel_sharding_strategy="optim_grads_params")
    groups, _, _ = pgb._get_parameter_groups(model, policy, {})
    grads = hm.predict(model, units, grad_comm_dtype=torch.bfloat16)["fsdp_grads"]
    print(f"{len(groups)} parameter groups: " + ", ".join(
        f"unit {g.fsdp_unit_id} {sum(p.numel() for p in g.params)} el" for g in groups))
    print(f"Megatron MaxPoolAllocator plans {grads['megatron_planned'] / 2**20:.2f} MiB (bf16 grads); "
          f"bound {grads['bound'] / 2**20:.2f} MiB")
    for planner in ("max", "by_bytes", "interval"):
        print(f"  {planner:9s} arena {grads[planner] / 2**20:9.2f} MiB")


# ---------------------------------------------------------------------------------------------
# one training run (a child process; with --world-size N one process per rank)


def init_rank(rank, args):
    """One rank's CUDA device and NCCL process group; deterministic kernels, no TF32. With
    ``args.collective_timeout`` (seconds) set, every collective of the group times out after it."""
    import datetime

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    timeout = getattr(args, "collective_timeout", None)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=args.world_size, device_id=device,
                            **({"timeout": datetime.timedelta(seconds=timeout)} if timeout else {}))
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return device


def train(rank, args, run, out_path):
    import torch
    import torch.distributed as dist

    device = init_rank(rank, args)
    from megatron_fsdp import MixedPrecisionPolicy, fully_shard_model, fully_shard_optimizer
    from megatron_fsdp import utils as mutils

    hm = None
    agreements = []
    if run != "megatron_maxpool":
        from headroom.torch import megatron_fsdp as hm

        checked = hm.PoolAllocator._check_agreement

        def counted(self):  # records every cross-rank fingerprint comparison
            sizes = [dist.get_world_size(g) for g in self._agreement_groups()]
            checked(self)
            agreements.append({"pool": self.name, "fingerprint": self.plan.fingerprint, "group_sizes": sizes})

        hm.PoolAllocator._check_agreement = counted
        hm.install(planner=run.replace("+profile", ""))
    model, units = build_model(args.hidden, args.layers, device)
    fsdp = fully_shard_model(
        model,
        fsdp_unit_modules=units,
        zero_dp_strategy=3,
        device=device,
        fsdp_double_buffer=True,
        maxpool_double_buffer=True,
        mixed_precision_policy=MixedPrecisionPolicy(main_params_dtype=torch.float32,
                                                    main_grads_dtype=torch.float32,
                                                    grad_comm_dtype=torch.bfloat16),
    )
    opt = fully_shard_optimizer(torch.optim.Adam(fsdp.parameters(), lr=1e-4))
    g = torch.Generator().manual_seed(99)
    xs = [torch.randn(args.tokens, args.hidden, generator=g).to(device) for _ in range(args.steps)]
    ys = [torch.randn(args.tokens, args.hidden, generator=g).to(device) for _ in range(args.steps)]
    prof = None
    if run.endswith("+profile"):
        from headroom.torch.profile import MemoryProfiler

        prof = MemoryProfiler(steps=[0, 3], out_dir=args.snapshots, coords={"dp": rank, "pp": 0, "tp": 0, "cp": 0})
    losses, times = [], []
    base = None
    for step in range(args.steps):
        if step == 2:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if prof is not None:
            prof.begin_step(step)
        out = fsdp(xs[step])
        loss = torch.nn.functional.mse_loss(out, ys[step])
        loss.backward()
        opt.step()
        opt.zero_grad()
        if prof is not None:
            prof.end_step(step)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
        if step == 0 and hm is not None:
            hm.end_step()  # plan on step 0's leases and allocate the arenas
    peak = torch.cuda.max_memory_allocated()
    mine = {"rank": rank, "sharding": sharding_info(fsdp), "agreements": agreements,
            "fingerprints": {a.name: a.plan.fingerprint for a in hm.allocators() if a.arena is not None}
            if hm is not None else {},
            "loss_bits": [struct.pack("<d", x).hex() for x in losses]}
    everyone = [None] * args.world_size
    dist.all_gather_object(everyone, mine)
    result = {
        "run": run,
        "world_size": args.world_size,
        "losses": losses,
        "loss_bits": [struct.pack("<d", x).hex() for x in losses],
        "step_ms": times,
        "median_step_ms": statistics.median(times[2:]),
        "peak_allocated": peak,
        "allocated_at_step2": base,
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "ranks": everyone,
    }
    gbuf = mutils.get_global_memory_buffer().buffer
    result["megatron_slot_bytes"] = {f"{k[0]}": v.numel() * v.element_size() for k, v in gbuf.items()}
    if hm is not None:
        pools = []
        for a in hm.allocators():
            r = a.report()
            r["plan_arena_bytes"] = a.plan.arena_bytes if a.plan is not None else None
            r["fingerprint"] = a.plan.fingerprint if a.plan is not None else None
            r.pop("stats")
            pools.append(r)
        result["pools"] = pools
    if prof is not None:
        result["snapshots"] = [str(p) for p in prof.written]
    if rank == 0:
        Path(out_path).write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def sharding_info(fsdp) -> dict:
    """Megatron's buffers per parameter group on this rank: whether each is data-distributed,
    its local elements (data_size) and the unit's (bucket_index.size)."""
    out = {"buffers": [], "error": None}
    try:
        for i, g in enumerate(fsdp.param_and_grad_buffer.parameter_groups):
            for kind in ("model_weight_buffer", "main_weight_buffer", "main_grad_buffer"):
                b = getattr(g, kind, None)
                if b is None:
                    continue
                out["buffers"].append({"group": i, "kind": kind, "distributed": bool(b.is_data_distributed),
                                       "local": int(b.data_size), "unit": int(b.bucket_index.size)})
    except Exception as e:  # noqa: BLE001 - reported by the sharding check
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def sharded(ranks, world) -> tuple:
    """(ok, text): every rank's weight and main-gradient buffers are sharded N ways."""
    problems = []
    for r in ranks:
        info = r["sharding"]
        if info["error"] or not info["buffers"]:
            problems.append(f"rank {r['rank']}: no buffers read ({info['error']})")
            continue
        for b in info["buffers"]:
            if b["kind"] == "main_weight_buffer" and b["local"] == 0:
                continue
            if not b["distributed"] or not b["local"] < b["unit"] or b["local"] * world < b["unit"]:
                problems.append(f"rank {r['rank']} group {b['group']} {b['kind']}: local {b['local']} of {b['unit']}"
                                f"{'' if b['distributed'] else ' (not distributed)'}")
    n = sum(len(r["sharding"]["buffers"]) for r in ranks)
    if problems:
        return False, f"{len(problems)} of {n} buffers not sharded {world} ways: " + "; ".join(problems[:6])
    b = ranks[0]["sharding"]["buffers"][0]
    return True, (f"{n} buffers over {world} ranks, each local shard < its unit, {world} shards cover it "
                  f"(e.g. group 0 {b['kind']}: {b['local']} of {b['unit']} elements)")


def agreed(result, world) -> tuple:
    """(ok, text): every arena of this run was allocated after a fingerprint comparison across
    `world` ranks, on every rank, and the fingerprints are the same everywhere."""
    ranks = result["ranks"]
    arenas = [p["name"] for p in result["pools"] if p["arena_bytes"]]
    problems = []
    for r in ranks:
        seen = {a["pool"]: a for a in r["agreements"]}
        for name in arenas:
            a = seen.get(name)
            if a is None:
                problems.append(f"rank {r['rank']}: arena {name} allocated without a fingerprint comparison")
            elif world not in a["group_sizes"]:
                problems.append(f"rank {r['rank']}: {name} compared in groups of {a['group_sizes']}, not {world}")
    fps = [r["fingerprints"] for r in ranks]
    if any(f != fps[0] for f in fps):
        problems.append(f"fingerprints differ: {fps}")
    if problems:
        return False, "; ".join(problems[:6])
    return bool(arenas), (f"{len(arenas)} arenas, each after one fingerprint comparison across {world} ranks; "
                          f"fingerprints equal on every rank ({', '.join(sorted(fps[0].values()))[:120]})")


def nccl_register(rank, args, out_path):
    """One rank of the registration check: a PoolAllocator's arena inside a torch.cuda.MemPool on
    the NCCL backend's allocator, registered with the process group once."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=args.world_size, device_id=device)
    res = {"rank": rank, "error": None}
    try:
        import megatron_fsdp.param_and_grad_buffer as pgb
        from headroom.torch import megatron_fsdp as hm

        with torch.device("meta"):
            model, units = build_model(args.hidden, args.layers, "meta")
        policy = pgb.BucketingPolicy(fsdp_unit_modules=units, data_parallel_sharding_strategy="optim_grads_params")
        groups, _, _ = pgb._get_parameter_groups(model, policy, {})
        backend = dist.group.WORLD._get_backend(device)
        try:
            pool = torch.cuda.MemPool(backend.mem_allocator)
            res["allocator"] = "NCCL (ncclMemAlloc)"
        except Exception as e:  # noqa: BLE001 - an older torch: the default allocator, still registrable
            pool = torch.cuda.MemPool()
            res["allocator"] = f"default ({type(e).__name__}: {e})"
        a = hm.PoolAllocator("nccl_register_check", groups, dtype_fn=lambda pg: torch.bfloat16)
        numel = [sum(p.numel() for p in g.params) for g in groups]

        def take(b):
            return a.allocate(b, numel[b], torch.bfloat16, device,
                              mem_alloc_context=lambda: torch.cuda.use_mem_pool(pool))

        for b in range(len(groups)):  # the learned step: two buckets alive at a time
            take(b)
            if b >= 1:
                a.free(b - 1)
        a.free(len(groups) - 1)
        a.end_step()
        held = [take(0), take(1)]
        segments = pool.snapshot()
        base, n = a.arena.data_ptr(), a.arena.numel()
        res["segments"] = len(segments)
        res["segment_bytes"] = [s["total_size"] for s in segments]
        res["arena_bytes"], res["plan_arena_bytes"] = n, a.plan.arena_bytes
        inside = [s for s in segments if s["address"] <= base and base + n <= s["address"] + s["total_size"]]
        res["arena_in_segment"] = len(inside) == 1
        res["slots_in_segment"] = bool(inside) and all(
            inside[0]["address"] <= h.data.data_ptr() < inside[0]["address"] + inside[0]["total_size"] for h in held)
        backend.register_mem_pool(pool)  # NCCL registers each segment of the pool: one here
        res["registered"] = True
        x = held[0].data
        x.fill_(rank + 1)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        res["all_reduce_right"] = bool((x == sum(range(1, args.world_size + 1))).all())
        # every bucket in turn, two alive at a time, as the double buffer runs: no new segment
        a.free(0)
        a.free(1)
        for b in range(len(groups)):
            take(b)
            if b >= 1:
                a.free(b - 1)
        a.free(len(groups) - 1)
        after = pool.snapshot()
        res["segments_after_cycle"] = len(after)
        res["arena_moved"] = a.arena.data_ptr() != base
        backend.deregister_mem_pool(pool)
        # the arena back to the pool, then the pool's memory back to NCCL's allocator, while the
        # process group still exists (torch's order for a registered MemPool)
        del x, held
        a = None
        gc.collect()
        pool = None
        gc.collect()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - reported by the parent
        import traceback

        res["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
    everyone = [None] * args.world_size
    dist.all_gather_object(everyone, res)
    if rank == 0:
        Path(out_path).write_text(json.dumps({"run": "nccl_register", "ranks": everyone}))
    dist.barrier()
    dist.destroy_process_group()


def registration_checks(reg) -> list:
    """(text, ok) of the registration run, from its ranks' results: the parent's checks, and the
    verdict of the run alone (tools/gpu-stress runs it as a child)."""
    errors = [f"rank {r['rank']}: {r['error']}" for r in reg if r.get("error")]
    one = all(not r.get("error") and r["segments"] == 1 and r["arena_in_segment"] and r["slots_in_segment"]
              and r["arena_bytes"] == r["plan_arena_bytes"] for r in reg)
    return [(f"NCCL: the arena is one segment of the NCCL pool on every rank, as planned "
             f"({[(r.get('segments'), r.get('arena_bytes'), r.get('allocator')) for r in reg]})"
             + (f"; {errors[0][:600]}" if errors else ""), one),
            ("NCCL: the pool registered with the process group once per rank, an all_reduce on a slot "
             "view right, still one segment (same address) after allocate / free of every bucket",
             all(not r.get("error") and r.get("registered") and r.get("all_reduce_right")
                 and r.get("segments_after_cycle") == 1 and r.get("arena_moved") is False for r in reg))]


def child(args) -> int:
    """One child run; its exit status. A training run raises on any error (the spawn fails); the
    registration run reports its errors in its result, judged here as the parent would."""
    fn = nccl_register if args.child == "nccl_register" else train
    extra = () if args.child == "nccl_register" else (args.child,)
    if args.world_size == 1:
        fn(0, args, *extra, args.result)
    else:
        import torch.multiprocessing as mp

        mp.spawn(fn, args=(args, *extra, args.result), nprocs=args.world_size, join=True)
    if args.child != "nccl_register":
        return 0
    failed = [text for text, ok in registration_checks(json.loads(Path(args.result).read_text())["ranks"]) if not ok]
    for text in failed:
        print(f"FAIL {text}")
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# the parent: one child per allocator, then checks, table, JSON, plots


def pool_bytes(r) -> int:
    if r["run"] == "megatron_maxpool":
        return sum(v for k, v in r["megatron_slot_bytes"].items() if k.startswith("fsdp_"))
    return sum(p["arena_bytes"] or 0 for p in r["pools"])


def render_snapshot(path: Path, out: Path, title: str):
    """torch's own viewer code reads the snapshot (HTML), and a PNG of its active-memory
    timeline: bytes allocated after every trace event, headroom pool slots apart."""
    import pickle

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torch.cuda import _memory_viz

    snap = pickle.loads(path.read_bytes())
    (out / (path.stem + ".trace.html")).write_text(_memory_viz.trace_plot(snap))
    (out / (path.stem + ".segments.html")).write_text(_memory_viz.segment_plot(snap))
    live = {}
    for seg in snap["segments"]:
        addr = seg["address"]
        for blk in seg["blocks"]:
            if blk["state"] == "active_allocated":
                pool = any(f.get("filename") == "headroom/pool" for f in blk.get("frames", []))
                live[addr] = (blk["size"], pool)
            addr += blk["size"]
    trace = [e for t in snap["device_traces"] for e in t]
    # replay backwards to the state before the trace, then forwards to draw it
    state = dict(live)
    for e in reversed(trace):
        pool = any(f.get("filename") == "headroom/pool" for f in e.get("frames", []))
        if e["action"] == "alloc":
            state.pop(e["addr"], None)
        elif e["action"] == "free_completed":
            state[e["addr"]] = (e["size"], pool)
    xs, total, slots = [], [], []
    for i, e in enumerate(trace):
        pool = any(f.get("filename") == "headroom/pool" for f in e.get("frames", []))
        if e["action"] == "alloc":
            state[e["addr"]] = (e["size"], pool)
        elif e["action"] == "free_completed":
            state.pop(e["addr"], None)
        else:
            continue
        xs.append(i)
        total.append(sum(s for s, _ in state.values()) / 2**20)
        slots.append(sum(s for s, p in state.values() if p) / 2**20)
    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.fill_between(xs, 0, slots, step="post", label="headroom pool slots (by unit)", color="tab:orange")
    ax.fill_between(xs, slots, total, step="post", label="other torch allocations", color="tab:blue", alpha=0.5)
    ax.set_xlabel("trace event")
    ax.set_ylabel("MiB allocated")
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    png = out / (path.stem + ".png")
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


def mempool_check(args) -> dict:
    """A PoolAllocator's arena allocated inside torch.cuda.use_mem_pool (the way Megatron's
    NCCL memory pool context is passed as mem_alloc_context) is one segment of that pool, and
    every slot lies in it: what NCCL user-buffer registration of the pool then registers."""
    import torch
    import megatron_fsdp.param_and_grad_buffer as pgb
    from headroom.torch import megatron_fsdp as hm

    with torch.device("meta"):
        model, units = build_model(args.hidden, args.layers, "meta")
    policy = pgb.BucketingPolicy(fsdp_unit_modules=units, data_parallel_sharding_strategy="optim_grads_params")
    groups, _, _ = pgb._get_parameter_groups(model, policy, {})
    pool = torch.cuda.MemPool()
    a = hm.PoolAllocator("mempool_check", groups, dtype_fn=lambda pg: torch.bfloat16)
    device = torch.device("cuda", 0)
    def take(b):
        return a.allocate(b, sum(p.numel() for p in groups[b].params), torch.bfloat16, device,
                          mem_alloc_context=lambda: torch.cuda.use_mem_pool(pool))

    for b in range(len(groups)):  # the learned step
        take(b)
        a.free(b)
    a.end_step()
    held = [take(b) for b in range(2)]
    segments = pool.snapshot()
    base, n = a.arena.data_ptr(), a.arena.numel()
    inside = [s for s in segments if s["address"] <= base and base + n <= s["address"] + s["total_size"]]
    ok = len(segments) == 1 and len(inside) == 1 and all(
        inside[0]["address"] <= h.data.data_ptr() < inside[0]["address"] + inside[0]["total_size"] for h in held)
    return {"segments": len(segments), "segment_bytes": [s["total_size"] for s in segments],
            "arena_bytes": n, "plan_arena_bytes": a.plan.arena_bytes, "one_segment": ok}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--port", type=int, default=29611)
    ap.add_argument("--plan-only", action="store_true")
    ap.add_argument("--child", choices=RUNS + ["interval+profile", "nccl_register"])
    ap.add_argument("--result")
    ap.add_argument("--snapshots")
    args = ap.parse_args()
    if args.plan_only:
        plan_only(args)
        return 0
    require_gpus_and_megatron(args.world_size)
    if not import_headroom():
        skip("headroom's Python package is not importable (pip install . from the repository, or build "
             "with HEADROOM_ENABLE_PYTHON=ON)")
    if args.child:
        return child(args)

    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="megatron_fsdp_pool."))
    out.mkdir(parents=True, exist_ok=True)
    stem = "megatron_fsdp_pool" + (f"_dp{args.world_size}" if args.world_size > 1 else "")
    snapshots = out / ("snapshots" + (f"_dp{args.world_size}" if args.world_size > 1 else ""))
    results = {}
    # world size > 1: the registration check instead of the profiler run (a one-GPU concern)
    children = RUNS + (["interval+profile"] if args.world_size == 1 else ["nccl_register"])
    for i, run in enumerate(children):
        path = out / f"{stem}.{run}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", run, "--result", str(path),
               "--steps", str(args.steps), "--hidden", str(args.hidden), "--layers", str(args.layers),
               "--tokens", str(args.tokens), "--world-size", str(args.world_size),
               "--port", str(args.port + i), "--snapshots", str(snapshots)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not path.exists():
            print(f"run {run} failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
            return 1
        results[run] = json.loads(path.read_text())
        print(f"run {run}: {time.perf_counter() - t0:.1f} s")

    ref = results["megatron_maxpool"]
    ref_pool = pool_bytes(ref)
    checks = []
    rows = []
    for run in RUNS:
        r = results[run]
        bits_equal = r["loss_bits"] == ref["loss_bits"]
        row = {
            "run": run,
            "pool_bytes": pool_bytes(r),
            "peak_allocated": r["peak_allocated"],
            "peak_minus_maxpool": r["peak_allocated"] - ref["peak_allocated"],
            "median_step_ms": r["median_step_ms"],
            "step_time_vs_maxpool": r["median_step_ms"] / ref["median_step_ms"],
            "losses_bit_equal_to_maxpool": bits_equal,
        }
        if run != "megatron_maxpool":
            used = [p for p in r["pools"] if p["arena_bytes"]]
            row["arenas"] = used
            row["arena_equals_plan"] = all(p["arena_bytes"] == p["plan_arena_bytes"] for p in used)
            row["fallbacks"] = sum(sum(p["fallbacks"].values()) for p in r["pools"])
            checks.append((f"{run}: losses bit-equal to Megatron MaxPool over {args.steps} steps", bits_equal))
            checks.append((f"{run}: every arena equals its plan ({len(used)} arenas)", bool(used) and row["arena_equals_plan"]))
        rows.append(row)
    theirs = {k: v for k, v in ref["megatron_slot_bytes"].items() if k.startswith("fsdp_")}
    ours = pool_bytes(results["max"])
    checks.append((f"max: the arenas hold Megatron MaxPool's {len(theirs)} buffers ({sum(theirs.values())} B) within "
                   f"256-byte alignment per buffer ({ours} B)", 0 <= ours - sum(theirs.values()) < 256 * len(theirs)))
    interval = results["interval"]
    planned_saving = ref_pool - pool_bytes(interval)
    measured_saving = ref["peak_allocated"] - interval["peak_allocated"]
    # every block is rounded to 512 bytes by the caching allocator: one per slot and arena
    tolerance = 512 * (len(ref["megatron_slot_bytes"]) + len(interval["pools"]) + 2)
    # Two checks, so that a unit pattern where MaxPool wastes nothing reads as such, not as a
    # failed measurement.
    checks.append((f"interval: plans a saving over Megatron's MaxPool slots ({ref_pool / 2**20:.2f} MiB -> "
                   f"{pool_bytes(interval) / 2**20:.2f} MiB)"
                   + ("" if planned_saving > 0 else
                      "; none for this unit pattern: MaxPool's buffers hold no more than interval's plan"),
                   planned_saving > 0))
    if planned_saving > 0:
        checks.append((f"interval: peak lower by the planned amount ({measured_saving / 2**20:.2f} MiB measured, "
                       f"{planned_saving / 2**20:.2f} MiB planned)",
                       abs(measured_saving - planned_saving) <= tolerance))

    try:
        mem = mempool_check(args)
    except Exception as e:  # noqa: BLE001 - reported as a failed check with the reason
        mem = {"one_segment": False, "error": f"{type(e).__name__}: {e}"}
    checks.append((f"the arena inside torch.cuda.use_mem_pool is one segment of the pool ({mem})",
                   mem["one_segment"]))
    if args.world_size > 1:
        ok, text = sharded(ref["ranks"], args.world_size)
        checks.append((f"megatron_maxpool: real sharding: {text}", ok))
        ok, text = sharded(results["interval"]["ranks"], args.world_size)
        checks.append((f"interval: real sharding: {text}", ok))
        for run in RUNS[1:]:
            ok, text = agreed(results[run], args.world_size)
            checks.append((f"{run}: plan fingerprint checked across ranks: {text}", ok))
        for run in RUNS[1:]:
            bits = [r["loss_bits"] for r in results[run]["ranks"]]
            checks.append((f"{run}: every rank's losses bit-equal to rank 0's ({args.world_size} ranks)",
                           all(b == bits[0] for b in bits)))
        checks += registration_checks(results["nccl_register"]["ranks"])

    device = ref["device"]
    date = time.strftime("%Y-%m-%d", time.gmtime())
    from megatron_fsdp.package_info import __version__ as mfsdp_version

    print(f"\nMegatron-FSDP {mfsdp_version} "
          f"double-buffer pools, {device}, torch {ref['torch']}, world size {args.world_size}, {date}; "
          f"{args.layers} units H,L,L,..., hidden {args.hidden}, {args.steps} steps")
    print(f"{'allocator':18s} {'pool MiB':>9s} {'peak MiB':>9s} {'vs MaxPool':>11s} {'step ms':>8s} {'ratio':>6s}  losses")
    for row in rows:
        print(f"{row['run']:18s} {row['pool_bytes'] / 2**20:9.2f} {row['peak_allocated'] / 2**20:9.2f} "
              f"{row['peak_minus_maxpool'] / 2**20:+11.2f} {row['median_step_ms']:8.2f} "
              f"{row['step_time_vs_maxpool']:6.3f}  {'bit-equal' if row['losses_bit_equal_to_maxpool'] else 'DIFFER'}")
    for row in rows[1:]:
        print(f"{row['run']:18s} arenas used: " + (", ".join(
            f"{p['name']} {p['arena_bytes'] / 2**20:.2f} MiB (bound {(p['bound'] or 0) / 2**20:.2f})"
            for p in row["arenas"]) or "none") + f"; fallbacks {row['fallbacks']}")
    print("megatron_maxpool   slots: " + ", ".join(
        f"{k} {v / 2**20:.2f} MiB" for k, v in sorted(ref["megatron_slot_bytes"].items())))
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")

    png = None
    snaps = [Path(p) for p in results.get("interval+profile", {}).get("snapshots", [])]
    rendered = []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(15, 4))
        for run in RUNS:
            axes[0].plot(results[run]["losses"], label=run, linestyle="-" if run == "megatron_maxpool" else "--")
        axes[0].set_title("loss per step (curves coincide when bit-equal)")
        axes[0].set_xlabel("step")
        axes[0].legend()
        names = [r["run"] for r in rows]
        axes[1].bar(names, [r["peak_allocated"] / 2**20 for r in rows], label="peak allocated")
        axes[1].bar(names, [r["pool_bytes"] / 2**20 for r in rows], label="double-buffer pool")
        axes[1].set_ylabel("MiB")
        axes[1].set_title("memory (steps >= 2)")
        axes[1].legend()
        axes[2].bar(names, [r["median_step_ms"] for r in rows])
        axes[2].set_ylabel("ms")
        axes[2].set_title("median step time")
        for ax in axes[1:]:
            ax.tick_params(axis="x", rotation=20)
        fig.suptitle(f"Megatron-FSDP double buffers: MaxPool vs headroom planners ({device}, {date})")
        fig.tight_layout()
        png = out / f"{stem}.png"
        fig.savefig(png, dpi=120)
        plt.close(fig)
        for s in snaps:
            rendered.append(str(render_snapshot(s, out, f"interval run, {s.stem} ({device})")))
    except ImportError as e:
        print(f"no plots: {e}")
    if "interval+profile" in results:
        checks.append((f"profiler wrote {len(snaps)} snapshots (steps 0 and 3) that torch's _memory_viz renders",
                       len(snaps) == 2 and len(rendered) == 2))
        print(f"{'PASS' if checks[-1][1] else 'FAIL'}  {checks[-1][0]}")
    summary = {
        "device": device, "date": date, "torch": ref["torch"], "megatron_fsdp": mfsdp_version,
        "world_size": args.world_size,
        "steps": args.steps, "hidden": args.hidden, "layers": args.layers, "tokens": args.tokens,
        "rows": rows, "planned_saving_bytes": planned_saving, "measured_saving_bytes": measured_saving,
        "mempool": mem,
        "checks": [{"check": t, "pass": ok} for t, ok in checks],
        "snapshots": [str(s) for s in snaps], "snapshot_pngs": rendered, "plot": str(png) if png else None,
        "runs": results,
    }
    (out / f"{stem}.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({"bench": stem, "device": device, "date": date, "world_size": args.world_size,
                      "steps": args.steps, "checks": len(checks), "failed": sum(1 for _, ok in checks if not ok),
                      "step_time_vs_maxpool": {r["run"]: round(r["step_time_vs_maxpool"], 4) for r in rows},
                      "pool_mib": {r["run"]: round(r["pool_bytes"] / 2**20, 3) for r in rows}}))
    print(f"wrote {out / (stem + '.json')}" + (f", {png}" if png else ""))
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
