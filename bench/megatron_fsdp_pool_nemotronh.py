#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
# headroom: stress lanes (tools/gpu-stress --lanes: each stress run below meets its peer on a free port of its own)
# headroom: stress as interval: --child interval --config h1024 --steps 4 --port {port} --result {dir}/r.json --traces {dir}
# headroom: stress as max: --child max --config h1024 --steps 4 --port {port} --result {dir}/r.json --traces {dir}
# headroom: stress as by_bytes: --child by_bytes --config h1024 --steps 4 --port {port} --result {dir}/r.json --traces {dir}
"""Megatron-FSDP's MaxPool against headroom's planners on transformers' NemotronH.

The model nobody in this project wrote: ``NemotronHForCausalLM`` built from a config with
``hybrid_override_pattern="MEMEM*EMEMEM*EMEMEM*EMEM"`` (M = Mamba2 mixer, E = MoE with routed and
shared experts, * = attention), ``use_mamba_kernels=False`` (the PyTorch Mamba path, no
mamba_ssm), one FSDP unit per ``NemotronHBlock``, ``fully_shard_model(..., zero_dp_strategy=3,
fsdp_double_buffer=True, maxpool_double_buffer=True)`` from megatron-fsdp 0.6.1 (main params and
grads fp32, gradient communication bf16). The MoE weights (``.experts.`` in their names) are
expert parameters for Megatron-FSDP, so the run passes a device mesh and an expert mesh; with
EP = 1 the expert mesh is the data-parallel mesh:

    mesh = init_device_mesh("cuda", (dp, 1), mesh_dim_names=("fsdp", "tp"))
    fully_shard_model(model, device_mesh=mesh, dp_shard_dim="fsdp", tp_dim="tp",
                      expt_device_mesh=mesh, ...)

``--hsdp`` (4 GPUs): dp_outer 2 x dp_shard 2, mesh ("dp_outer", "fsdp", "tp") = (2, 2, 1), the
flattened (dp_outer, fsdp) group as ``hybrid_fsdp_group`` (and the expert one).

Configs (``--configs``, default all three): h1024 = hidden 1024, 8 experts, seq 1024 x batch 2;
h1024-mb2 = the same with 2 micro-batches a step; h2048 = hidden 2048, 16 experts, seq 512 x
batch 2. The fields the issue does not fix are chosen here and printed (``model_config``):
MoE expert FFN = hidden, shared-expert FFN = hidden / 2, 2 experts per token, Mamba heads =
2 hidden / 64 of 64, 8 groups, state 128, attention heads = hidden / 128 of 128 with 2 KV heads,
vocabulary 131072. With them Megatron's MaxPool plans 136.07 + 68.04 MiB for h1024 (the issue
measured 204.06 MiB).

For every config, one process group per run (fresh CUDA state, Megatron's global buffers and
peak statistics): Megatron's own MaxPoolAllocator, then ``headroom.torch.megatron_fsdp.install``
with each planner (``--planners``), ``--steps`` steps of causal-LM loss on random token ids
(the same ids in every run, different per rank), ``end_step()`` after every step. Prints one
table row per run:

  arena      the double-buffer bytes at steps >= 2 (MaxPool: Megatron's fsdp_* buffers; headroom:
             the arenas), params + grads
  bound      the C++ plan's max load on the recorded lifetimes (largest sum of bytes alive at once)
  peak       torch.cuda.max_memory_allocated over steps >= 2, the largest of the ranks
  step       median step time of steps >= 2 (the slowest rank each step), ratio to MaxPool
  losses     Y when every rank's losses are bit-equal to the MaxPool run's

and writes $OUT/megatron_fsdp_pool_nemotronh.json plus every rank's recorded lease trace of every
allocator (the text format of docs/pool.md, ``headroom-lease-trace 1``) as
$OUT/traces/nemotronh_<config>_dp<N>[_hsdp]_<planner>_rank<r>_<allocator>.trace.

  python3 bench/megatron_fsdp_pool_nemotronh.py [--world-size 2] [--configs h1024,h1024-mb2,h2048]
         [--planners max,by_bytes,interval] [--steps 10] [--hsdp]
  python3 bench/megatron_fsdp_pool_nemotronh.py --predict     # CPU: headroom's prediction, no GPU

Needs CUDA with --world-size GPUs, torch, transformers (NemotronH), megatron_fsdp 0.6.1 (pip install
--no-deps megatron_fsdp-0.6.1-py3-none-any.whl; it imports einops and packaging) and headroom's
Python package. Skips with a message otherwise (exit 0).
"""
import argparse
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from megatron_fsdp_pool import import_headroom, init_rank, require_gpus_and_megatron, skip  # noqa: E402 - the sibling bench's helpers

PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEM"
CONFIGS = {
    "h1024": dict(hidden=1024, experts=8, seq=1024, batch=2, micro_batches=1),
    "h1024-mb2": dict(hidden=1024, experts=8, seq=1024, batch=2, micro_batches=2),
    "h2048": dict(hidden=2048, experts=16, seq=512, batch=2, micro_batches=1),
}
MAXPOOL = "megatron_maxpool"


def model_config(hidden, experts, seq, pattern=PATTERN):
    """The NemotronH config of a bench row; ``pattern``: the block pattern (M, E, *), PATTERN by default."""
    from transformers import NemotronHConfig

    return NemotronHConfig(
        hidden_size=hidden, n_routed_experts=experts, num_experts_per_tok=2,
        moe_intermediate_size=hidden, moe_shared_expert_intermediate_size=hidden // 2,
        hybrid_override_pattern=pattern, use_mamba_kernels=False,
        mamba_num_heads=2 * hidden // 64, mamba_head_dim=64, n_groups=8, ssm_state_size=128,
        num_attention_heads=hidden // 128, num_key_value_heads=2, head_dim=128,
        vocab_size=131072, max_position_embeddings=max(4096, seq), use_cache=False,
    )


def require_headroom_and_nemotronh(skip_fn) -> None:
    """Calls skip_fn(why) without headroom's Python package or transformers' NemotronH."""
    if not import_headroom():
        skip_fn("headroom's Python package is not importable (pip install . from the repository)")
    try:
        from transformers import NemotronHConfig  # noqa: F401
    except ImportError as e:
        skip_fn(f"transformers with NemotronH is not importable ({e})")


def unit_classes():
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHBlock

    return [NemotronHBlock]


def predict(args) -> int:
    """headroom.torch.megatron_fsdp.predict on the meta device: what each planner will allocate."""
    import torch
    from transformers import NemotronHForCausalLM

    from headroom.torch import megatron_fsdp as hm

    for name in args.configs.split(","):
        c = CONFIGS[name]
        with torch.device("meta"):
            model = NemotronHForCausalLM(model_config(c["hidden"], c["experts"], c["seq"]))
        p = hm.predict(model, unit_classes(), grad_comm_dtype=torch.bfloat16, dp=args.world_size,
                       micro_batches=c["micro_batches"])
        for pool, r in p.items():
            print(f"{name:10s} {pool:12s} " + "  ".join(
                f"{k} {r[k] / 2**20:.2f}" for k in ("megatron_planned", "max", "by_bytes", "interval", "bound"))
                + " MiB" + (f"  (winner {r['winner']})" if "winner" in r else ""))
    return 0


# ---------------------------------------------------------------------------------------------
# one run: one process per rank


def train(rank, args, run, out_path):
    import torch
    import torch.distributed as dist

    device = init_rank(rank, args)
    from megatron_fsdp import MixedPrecisionPolicy, fully_shard_model, fully_shard_optimizer
    from megatron_fsdp import utils as mutils
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import NemotronHForCausalLM

    c = CONFIGS[args.config]
    hm = None
    if run != MAXPOOL:
        from headroom.torch import megatron_fsdp as hm

        hm.install(planner=run)
    mesh_kwargs = {}
    if args.hsdp:
        mesh = init_device_mesh("cuda", (2, args.world_size // 2, 1), mesh_dim_names=("dp_outer", "fsdp", "tp"))
        hybrid = mesh["dp_outer", "fsdp"]._flatten("hsdp").get_group()
        mesh_kwargs = dict(dp_outer_dim="dp_outer", hybrid_fsdp_group=hybrid, hybrid_fsdp_expt_group=hybrid)
    else:
        mesh = init_device_mesh("cuda", (args.world_size, 1), mesh_dim_names=("fsdp", "tp"))
    torch.manual_seed(1234)
    with device:  # initialised on the GPU: the same weights in every run
        model = NemotronHForCausalLM(model_config(c["hidden"], c["experts"], c["seq"]))
    fsdp = fully_shard_model(
        model, device_mesh=mesh, dp_shard_dim="fsdp", tp_dim="tp", expt_device_mesh=mesh, **mesh_kwargs,
        fsdp_unit_modules=unit_classes(), zero_dp_strategy=3, device=device,
        fsdp_double_buffer=True, maxpool_double_buffer=True,
        mixed_precision_policy=MixedPrecisionPolicy(main_params_dtype=torch.float32,
                                                    main_grads_dtype=torch.float32,
                                                    grad_comm_dtype=torch.bfloat16),
    )
    opt = fully_shard_optimizer(torch.optim.Adam(fsdp.parameters(), lr=1e-4))
    g = torch.Generator().manual_seed(99 + rank)
    ids = [[torch.randint(0, 131072, (c["batch"], c["seq"]), generator=g).to(device)
            for _ in range(c["micro_batches"])] for _ in range(args.steps)]
    losses, times = [], []
    for step in range(args.steps):
        if step == 2:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for x in ids[step]:
            loss = fsdp(input_ids=x, labels=x).loss / c["micro_batches"]
            loss.backward()
            losses.append(loss.item())
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        if hm is not None:
            hm.end_step()  # step 0: plan on the recorded lifetimes and allocate the arenas
    peak = torch.cuda.max_memory_allocated()
    gbuf = mutils.get_global_memory_buffer().buffer
    mine = {
        "rank": rank, "loss_bits": [struct.pack("<d", x).hex() for x in losses], "losses": losses,
        "step_ms": times, "peak_allocated": peak,
        "maxpool_buffers": {k[0]: v.numel() * v.element_size() for k, v in gbuf.items() if k[0].startswith("fsdp_")},
        "pools": [],
    }
    if hm is not None:
        tdir = Path(args.traces)
        tdir.mkdir(parents=True, exist_ok=True)
        for a, r in zip(hm.allocators(), hm.report()):
            mine["pools"].append(r)
            if r["acquires"]:
                tag = f"nemotronh_{args.config}_dp{args.world_size}{'_hsdp' if args.hsdp else ''}_{run}_rank{rank}_{a.name}"
                (tdir / f"{tag}.trace").write_text(a.trace.to_text())
    everyone = [None] * args.world_size
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        Path(out_path).write_text(json.dumps({
            "run": run, "config": args.config, "ranks": everyone,
            "device": torch.cuda.get_device_name(device), "torch": torch.__version__,
        }, default=str))
    dist.barrier()
    dist.destroy_process_group()


def child(args) -> None:
    import torch.multiprocessing as mp

    mp.spawn(train, args=(args, args.child, args.result), nprocs=args.world_size, join=True)


# ---------------------------------------------------------------------------------------------
# the parent


def row_of(r, ref) -> dict:
    ranks = r["ranks"]
    steps = len(ranks[0]["step_ms"])
    per_step = [max(x["step_ms"][s] for x in ranks) for s in range(steps)]
    if r["run"] == MAXPOOL:
        arena = max(sum(x["maxpool_buffers"].values()) for x in ranks)
        bound = None
        by_pool = {"params": max(sum(v for k, v in x["maxpool_buffers"].items() if k.startswith("fsdp_params"))
                                 for x in ranks),
                   "grads": max(sum(v for k, v in x["maxpool_buffers"].items() if k.startswith("fsdp_grads"))
                                for x in ranks)}
    else:
        arena = max(sum(p["arena_bytes"] for p in x["pools"]) for x in ranks)
        bound = max(sum(p["bound"] or 0 for p in x["pools"]) for x in ranks)
        by_pool = {p["name"]: p["arena_bytes"] for p in ranks[0]["pools"] if p["arena_bytes"]}
    row = {
        "run": r["run"], "arena": arena, "bound": bound, "by_pool": by_pool,
        "peak": max(x["peak_allocated"] for x in ranks),
        "median_step_ms": statistics.median(per_step[2:]),
        "bit_equal": ref is None or all(a["loss_bits"] == b["loss_bits"] for a, b in zip(ranks, ref["ranks"])),
        "fallbacks": sum(sum(p["fallbacks"].values()) for x in ranks for p in x["pools"]),
        "winners": sorted({f"{p['name']}:{p['winner']}" for x in ranks for p in x["pools"] if p.get("winner")}),
    }
    return row


def table(results, configs, runs) -> list:
    """Prints one row per (config, run) against the config's MaxPool run; returns the rows."""
    mib = lambda n: "-" if n is None else f"{n / 2**20:.2f}"  # noqa: E731
    print(f"{'config':10s} {'run':17s} {'arena MiB':>10s} {'bound MiB':>10s} {'/bound':>6s} {'peak MiB':>10s} {'d peak':>8s} "
          f"{'step ms':>8s} {'x MaxPool':>9s} {'losses':>6s} {'fallbk':>6s}  arenas")
    rows = []
    for config in configs:
        ref = results.get((config, MAXPOOL))
        base = row_of(ref, None) if ref else None
        for run in runs:
            r = results.get((config, run))
            if r is None:
                continue
            row = row_of(r, ref)
            row["config"] = config
            if base:
                row["peak_minus_maxpool"] = row["peak"] - base["peak"]
                row["step_vs_maxpool"] = row["median_step_ms"] / base["median_step_ms"]
            rows.append(row)
            ratio = f"{row['arena'] / row['bound']:.3f}" if row["bound"] else "-"
            print(f"{config:10s} {run:17s} {mib(row['arena']):>10s} {mib(row['bound']):>10s} {ratio:>6s} {mib(row['peak']):>10s} "
                  f"{(row.get('peak_minus_maxpool', 0)) / 2**20:+8.2f} {row['median_step_ms']:8.2f} "
                  f"{row.get('step_vs_maxpool', float('nan')):9.3f} {'Y' if row['bit_equal'] else 'N':>6s} "
                  f"{row['fallbacks']:6d}  " + ", ".join(f"{k} {v / 2**20:.2f}" for k, v in row["by_pool"].items()))
    for config in configs:
        ours = [results[(config, run)] for run in runs if run != MAXPOOL and (config, run) in results]
        if len(ours) > 1:
            same = all(a["loss_bits"] == b["loss_bits"] for r in ours[1:] for a, b in zip(r["ranks"], ours[0]["ranks"]))
            print(f"{config}: headroom planners' losses bit-equal to each other on every rank: {'Y' if same else 'N'}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="h1024,h1024-mb2,h2048")
    ap.add_argument("--planners", default="max,by_bytes,interval")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--hsdp", action="store_true", help="dp_outer 2 x dp_shard world/2 (4 GPUs)")
    ap.add_argument("--port", type=int, default=29811)
    ap.add_argument("--predict", action="store_true", help="CPU: headroom's prediction only")
    ap.add_argument("--child")
    ap.add_argument("--config")
    ap.add_argument("--result")
    ap.add_argument("--traces")
    args = ap.parse_args()
    for name in args.configs.split(","):
        if name not in CONFIGS:
            ap.error(f"--configs: {name!r}; expected some of {', '.join(CONFIGS)}")
    if args.hsdp and (args.world_size < 4 or args.world_size % 2):
        ap.error(f"--hsdp needs an even --world-size >= 4 (dp_outer 2 x dp_shard world/2); got {args.world_size}")
    require_headroom_and_nemotronh(skip)
    if args.predict:
        return predict(args)
    require_gpus_and_megatron(args.world_size)
    if args.child:
        child(args)
        return 0

    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="megatron_fsdp_pool_nemotronh."))
    out.mkdir(parents=True, exist_ok=True)
    runs = [MAXPOOL] + args.planners.split(",")
    results, failed = {}, []
    port = args.port
    for config in args.configs.split(","):
        for run in runs:
            path = out / f"nemotronh.{config}.{run}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", run, "--config", config,
                   "--result", str(path), "--steps", str(args.steps), "--world-size", str(args.world_size),
                   "--port", str(port), "--traces", str(out / "traces")] + (["--hsdp"] if args.hsdp else [])
            port += 1
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0 or not path.exists():
                print(f"{config} {run} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}",
                      flush=True)
                failed.append(f"{config}/{run}")
                continue
            results[(config, run)] = json.loads(path.read_text())
            print(f"{config} {run}: {time.perf_counter() - t0:.1f} s", flush=True)

    from megatron_fsdp.package_info import __version__ as mfsdp_version

    date = time.strftime("%Y-%m-%d", time.gmtime())
    device = next(iter(results.values()))["device"] if results else "?"
    layout = f"HSDP {2} x {args.world_size // 2}" if args.hsdp else f"dp = {args.world_size}"
    print(f"\nNemotronH {PATTERN} under Megatron-FSDP {mfsdp_version}, {layout}, {device}, "
          f"{args.steps} steps, {date}")
    rows = table(results, args.configs.split(","), runs)
    summary = {"bench": "megatron_fsdp_pool_nemotronh", "device": device, "date": date,
               "megatron_fsdp": mfsdp_version, "world_size": args.world_size, "hsdp": args.hsdp,
               "steps": args.steps, "pattern": PATTERN, "configs": {k: CONFIGS[k] for k in args.configs.split(",")},
               "model_config": {k: model_config(CONFIGS[k]["hidden"], CONFIGS[k]["experts"], CONFIGS[k]["seq"]).to_dict()
                                for k in args.configs.split(",")},
               "rows": rows, "failed": failed, "runs": {f"{c}/{r}": v for (c, r), v in results.items()}}
    (out / "megatron_fsdp_pool_nemotronh.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"wrote {out / 'megatron_fsdp_pool_nemotronh.json'} and {out / 'traces'}/*.trace")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
