#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
# headroom: stress lanes (tools/gpu-stress --lanes: its ranks meet on a free port of their own; send / recv of whole micro-batches)
# headroom: stress as short: --tokens 4096 --microbatch-tokens 1024 --steps 1 --microbatches 2,4 --port {port}
"""PyTorch peer of bench_pipeline_retention: the same toy LM on 2 GPUs with
torch.distributed.pipelining Schedule1F1B, step(..., return_outputs=True) (PyTorch's default:
the last stage keeps every micro-batch's logits and merges them) and return_outputs=False
(torchtitan's call since pytorch#165822), for m in {2, 4, 8, 16} at a fixed global batch.

Model (the same shapes as the C++ bench): bf16, hidden 4096, stage 0 = 2 x (Linear 4096x4096,
no bias, ReLU), stage 1 = 1 x (Linear, ReLU) + LM head Linear(4096, 131072, no bias), loss
cross_entropy(mean) on the head's bf16 logits [micro-batch tokens x 131072]. Global batch 16384
tokens, so a micro-batch has 16384 / m tokens (series "global"); and a fixed micro-batch of 2048
tokens, global batch m x 2048 (series "microbatch", where what return_outputs=True keeps grows with m).

Per row and stage: torch.cuda.max_memory_allocated() over one step (after reset_peak_memory_stats;
the warm-up step has allocated the gradients, as in the C++ bench) and the median step time
(host wall clock between barriers, after synchronize). Gradients are set to None before every step,
as optimizer.zero_grad() does, so each step allocates them as a training step would.

The script spawns its 2 ranks itself (torch.multiprocessing, NCCL, NCCL_NVLS_ENABLE=0). If
PyTorch, the GPUs or the pipelining API are not what it expects (no return_outputs keyword,
fewer than 2 GPUs, a constructor that changed), it prints why and "skipped" rows and exits 0, so
a GPU check run is never broken by a peer that cannot run. Any other exception in a rank, a rank
killed by a signal or one that does not answer in time fails the run (FAILED, exit 1).

    python3 bench/pipeline_retention_torch.py [--tokens 16384] [--microbatch-tokens 2048] [--steps 3]
                                              [--microbatches 2,4,8,16]

Output: a table, then one JSON line.
"""
import argparse
import inspect
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spawn_ranks import gather  # noqa: E402 - the ranks, started and told apart

HIDDEN = 4096
VOCAB = 131072
STAGE0_LAYERS = 2
STAGE1_LAYERS = 1
DEADLINE_S = 240  # the whole run; gpu-check's per-program limit is 300 s


def emit_skipped(reason, args):
    print(f"skipped: pipeline_retention_torch: {reason}")
    rows = [{"series": series, "policy": f"torch_return_outputs_{flag}", "m": m, "status": "skipped"}
            for series in ("global", "microbatch") for flag in (True, False) for m in args.microbatches]
    print(json.dumps({"bench": "pipeline_retention_torch", "status": "skipped", "reason": reason, "rows": rows}))
    return 0


class CannotRun(Exception):
    """torch's pipelining API is not what this bench drives: the peer is skipped, not failed."""


def worker(rank, world, args, port, results):
    """One pipeline stage. Puts ('ok', rank, rows), ('skip', rank, text) or ('error', rank, text)
    on `results` (bench/spawn_ranks.py)."""
    try:
        import datetime

        import torch
        import torch.distributed as dist
        import torch.nn.functional as F
        from torch import nn
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))

        class Block(nn.Module):
            def __init__(self, layers, head):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(layers))
                self.head = nn.Linear(HIDDEN, VOCAB, bias=False) if head else None

            def forward(self, x):
                for layer in self.layers:
                    x = F.relu(layer(x))
                return self.head(x) if self.head is not None else x

        torch.manual_seed(1234 + rank)
        last = rank == world - 1
        module = Block(STAGE1_LAYERS if last else STAGE0_LAYERS, last).to(device=device, dtype=torch.bfloat16)
        for p in module.parameters():
            nn.init.normal_(p, std=0.02)

        def loss_fn(logits, target):
            return F.cross_entropy(logits, target)

        step_params = inspect.signature(Schedule1F1B.step).parameters
        if "return_outputs" not in step_params:
            raise CannotRun(f"Schedule1F1B.step has no return_outputs keyword (parameters: {list(step_params)}); "
                               f"torch {torch.__version__}")

        most = max(args.tokens, args.microbatch_tokens * max(args.microbatches))
        gen = torch.Generator(device=device).manual_seed(99)
        x_all = torch.randn(most, HIDDEN, device=device, dtype=torch.bfloat16, generator=gen) if rank == 0 else None
        target_all = torch.randint(0, VOCAB, (most,), device=device, generator=gen) if last else None

        rows = []
        configs = [("global", m, args.tokens) for m in args.microbatches]
        configs += [("microbatch", m, m * args.microbatch_tokens) for m in args.microbatches]
        for (series, m, tokens), return_outputs in [(c, r) for c in configs for r in (True, False)]:
            x = x_all[:tokens] if rank == 0 else None
            target = target_all[:tokens] if last else None
            try:
                stage = PipelineStage(module, rank, world, device)
                schedule = Schedule1F1B(stage, m, loss_fn=loss_fn)
            except TypeError as e:  # a constructor that changed
                raise CannotRun(f"PipelineStage / Schedule1F1B: {e}") from e
            times, peaks = [], []
            for step in range(args.steps + 1):  # step 0 warms up (shape inference, cuBLAS)
                module.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                dist.barrier()
                torch.cuda.reset_peak_memory_stats(device)
                t0 = time.perf_counter()
                if rank == 0:
                    out = schedule.step(x, return_outputs=return_outputs)
                else:
                    losses = []
                    out = schedule.step(target=target, losses=losses, return_outputs=return_outputs)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                peak = torch.cuda.max_memory_allocated(device)
                del out
                if step > 0:
                    times.append(dt)
                    peaks.append(peak)
            rows.append({"series": series, "policy": f"torch_return_outputs_{return_outputs}", "m": m,
                         "tokens_per_microbatch": tokens // m, "stage": rank,
                         "peak_bytes": max(peaks), "step_ms": 1e3 * statistics.median(times)})
            del schedule, stage
        dist.barrier()
        dist.destroy_process_group()
        results.put(("ok", rank, rows, torch.__version__, torch.cuda.get_device_name(device)))
    except CannotRun as e:
        results.put(("skip", rank, str(e)))
    except BaseException as e:  # noqa: BLE001 - report anything: the run fails
        results.put(("error", rank, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384, help="global batch in tokens (fixed over m)")
    parser.add_argument("--microbatch-tokens", type=int, default=2048,
                        help="micro-batch in tokens of the fixed-micro-batch series")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per row (after one warm-up step)")
    parser.add_argument("--microbatches", type=lambda s: [int(v) for v in s.split(",")], default=[2, 4, 8, 16])
    parser.add_argument("--port", type=int, default=0, help="the ranks' TCP rendezvous (0: a free one)")
    args = parser.parse_args()
    if args.steps < 1 or args.microbatch_tokens < 1 or any(m < 1 or args.tokens % m != 0 for m in args.microbatches):
        parser.error(f"--steps must be >= 1 and every m must divide --tokens {args.tokens}; "
                     f"got steps {args.steps}, m {args.microbatches}")
    try:
        import torch
        import torch.multiprocessing as mp
        import torch.distributed.pipelining  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return emit_skipped(f"cannot import torch.distributed.pipelining ({type(e).__name__}: {e})", args)
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return emit_skipped(f"needs 2 GPUs, found {found}", args)

    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    ranks = gather(mp.get_context("spawn"), worker, 2, args, args.port, DEADLINE_S)
    # A peer that cannot run here (torch's pipelining API changed) is a skip; an exception in a
    # rank, a rank that died (a signal) or never answered is a failure of the run.
    if ranks.errors or ranks.died or (ranks.missing and not ranks.skipped):
        reason = "; ".join(ranks.errors[:1] + ranks.died) or f"ranks {ranks.missing} did not finish in {DEADLINE_S} s"
        print(f"pipeline_retention_torch: FAILED: {reason}")
        print(json.dumps({"bench": "pipeline_retention_torch", "status": "failed", "reason": reason}))
        return 1
    if ranks.skipped:
        return emit_skipped(ranks.skipped[0].strip().replace("\n", " | "), args)
    got = ranks.got

    version, device = got[0][3], got[0][4]
    rows = sorted(got[0][2] + got[1][2], key=lambda r: (r["series"], r["policy"], r["m"], r["stage"]))
    print(f"PyTorch {version} Schedule1F1B, toy LM (hidden {HIDDEN}, vocab {VOCAB}, bf16), 2 x {device}, "
          f"series global: {args.tokens} tokens per step, series microbatch: {args.microbatch_tokens} tokens per "
          f"micro-batch; peak = max_memory_allocated per stage over one step")
    print(f"{'series':<10} {'policy':<28} {'m':>3} {'T':>6} {'stage':>5} {'peak GiB':>9} {'step ms':>8}")
    for r in rows:
        print(f"{r['series']:<10} {r['policy']:<28} {r['m']:>3} {r['tokens_per_microbatch']:>6} {r['stage']:>5} "
              f"{r['peak_bytes'] / 2**30:>9.3f} {r['step_ms']:>8.1f}")
    print(json.dumps({"bench": "pipeline_retention_torch", "status": "ok", "torch": version, "device": device,
                      "gpus": 2, "tokens": args.tokens, "microbatch_tokens": args.microbatch_tokens, "hidden": HIDDEN, "vocab": VOCAB, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
