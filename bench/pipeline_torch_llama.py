#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
# headroom: stress lanes (tools/gpu-stress --lanes: its ranks meet on a free port of their own; send / recv of whole micro-batches)
# headroom: stress as short: --microbatches 2,4 --port {port}
"""headroom's prediction of a torch pipeline run against its measured peak, on transformers'
LlamaForCausalLM (a small config with Llama-3's vocabulary, 128256) on 2 GPUs (or DP2 x PP2 on 4).

Schedules, per m in {2, 4, 8, 16} and step(return_outputs=True | False):
  torch_1f1b        torch's PipelineStage + Schedule1F1B, 2 stages (embedding + half the layers |
                    the rest + norm + LM head)
  zb_h1             headroom's ZB-H1 through the full export (headroom.torch.pipelining), 2 stages
  interleaved_1f1b  headroom's interleaved 1F1B, 4 virtual stages (2 per GPU), through the export
  zbv               headroom's ZBV (the V: rank 0 holds stages 0 and 3), 4 virtual stages, export
Per row and rank: torch.cuda.max_memory_allocated (and max_memory_reserved) over one step, after a
warm-up step, against the prediction: the bytes allocated when the step starts (parameters,
gradients, torch's persistent buffers: measured) plus headroom's predicted peak for the step
(headroom.torch.pipelining.predict_memory: torch's output lifetime and retention, the schedule's
order, and per-stage sizes measured from one forward and backward of each stage on its GPU:
activations, output, the computation's own temporaries, and what torch's split backward keeps
from its input half to its weight half, and each half's temporaries: kept_for_weight,
weight_stash, input_workspace, weight_workspace). Target: within 5 % on every row.
Losses: the last stage's per-micro-batch losses against the same modules chained on one GPU.

--dp 2: 4 GPUs, DP2 x PP2 (the pipeline field report's setting, docs/pipeline.md), FSDP2 (fully_shard per decoder layer
and per stage) inside each stage, torch's Schedule1F1B and headroom's ZB-H1 / ZBV (the export with
UNSHARD / RESHARD). The prediction adds the unsharded parameters held while a stage computes.

    python3 bench/pipeline_torch_llama.py [--dp 1|2] [--microbatches 2,4,8,16] [--seq 2048]
        [--layers 8] [--hidden 1024] [--out DIR]   # DIR defaults to $OUT or .

Writes DIR/pipeline_torch_llama[_dp2].json and .png (peak vs m per rank, predicted vs measured);
prints a table and one JSON line. Prints "skipped" and exits 0 without the GPUs or packages.
"""
import argparse
import copy
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spawn_ranks import gather  # noqa: E402 - the ranks, started and told apart

VOCAB = 128256
DEADLINE_S = 280
SCHEDULES_PP = ("torch_1f1b", "zb_h1", "interleaved_1f1b", "zbv")
SCHEDULES_DP = ("torch_1f1b", "zb_h1", "zbv")


def build_model(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=args.hidden, intermediate_size=args.hidden * 3,
                         num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                         num_key_value_heads=max(1, args.hidden // 256), max_position_embeddings=args.seq,
                         tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(torch.bfloat16).eval()  # eval: no dropout (there is none in Llama)


def make_stage_class():
    import torch
    from torch import nn

    class Stage(nn.Module):
        """Layers [lo, hi) of the model, with the embedding on the first stage and norm + LM head on
        the last; the rotary embedding is recomputed from the sequence length on every stage."""

        def __init__(self, model, lo, hi, first, last):
            super().__init__()
            self.embed = model.model.embed_tokens if first else None
            self.layers = nn.ModuleList(model.model.layers[lo:hi])
            self.norm = model.model.norm if last else None
            self.head = model.lm_head if last else None
            self.rotary = model.model.rotary_emb

        def forward(self, x):
            h = self.embed(x) if self.embed is not None else x
            pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
            cos_sin = self.rotary(h, pos)
            for layer in self.layers:
                h = layer(h, attention_mask=None, position_ids=pos, position_embeddings=cos_sin)
                h = h[0] if isinstance(h, tuple) else h
            return self.head(self.norm(h)) if self.head is not None else h

    return Stage


def loss_fn(logits, target):
    import torch.nn.functional as F
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def stage_sizes(mod, stage, n, args, device):
    """One StageBytes for virtual stage `stage` from one forward and backward of one micro-batch
    on `device` (allocator deltas, the second of two passes, gradients already allocated):
    activations = held after the forward (and the loss) less the output; workspace = the
    temporaries above what the memory model counts (forward: above what it holds after;
    backward: above the input's gradient)."""
    import torch
    from headroom import pipeline
    first, last = stage == 0, stage == n - 1
    gen = torch.Generator(device=device).manual_seed(5)
    if first:
        inp = torch.randint(0, VOCAB, (1, args.seq), device=device, generator=gen)
    else:
        inp = torch.randn(1, args.seq, args.hidden, device=device, dtype=torch.bfloat16, generator=gen).requires_grad_()
    target = torch.randint(0, VOCAB, (1, args.seq), device=device, generator=gen)
    for _ in range(2):
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        y = mod(inp)
        loss = loss_fn(y, target) if last else None
        held_f = torch.cuda.memory_allocated(device) - base
        peak_f = torch.cuda.max_memory_allocated(device) - base
        out_bytes = y.numel() * y.element_size()
        grad = None if last else torch.randn_like(y)
        before_b = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        torch.autograd.backward(loss if last else y, None if last else grad)
        torch.cuda.synchronize(device)
        peak_b = torch.cuda.max_memory_allocated(device) - before_b
        in_grad = 0 if first else inp.numel() * inp.element_size()
        inp.grad = None
        del y, loss, grad
    activations = max(0, held_f - out_bytes)
    workspace = max(0, peak_f - held_f, peak_b - in_grad)
    kept, stash, input_workspace, weight_workspace = split_sizes(mod, first, last, inp, target, activations, out_bytes,
                                                                 workspace, device)
    return pipeline.StageBytes(activations=activations, output=out_bytes, workspace=workspace, kept_for_weight=kept,
                               weight_stash=stash, input_workspace=input_workspace, weight_workspace=weight_workspace)


def split_sizes(mod, first, last, inp, target, activations, out_bytes, workspace, device):
    """(kept_for_weight, weight_stash, input_workspace, weight_workspace): what torch's split
    backward keeps from its input half to its weight half, and each half's temporaries, from one run of torch's
    own stage_backward_input and stage_backward_weight (as PipelineStage calls them):
    weight_stash, the gradients it stashes at the weight nodes (the logits' gradient on the last
    stage); kept_for_weight, the part of the activations its retained graph still holds (from
    the allocator: what the input half leaves allocated, less the input gradient and that stash,
    plus what it let go: on the last stage also the logits, which the stage detaches); the input
    half's peak above its start less the input gradient and the stash, the weight half's peak
    above its start. Stage 0: torch skips the input half and runs the whole backward
    at W, so all the activations are kept and W's temporaries are the backward's."""
    import torch
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
    if first:
        return activations, 0, 0, workspace
    y = mod(inp)
    loss = loss_fn(y, target) if last else None
    grad = None if last else torch.randn_like(y)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    _, groups = stage_backward_input((loss,) if last else (y,), None if last else [grad], [inp], mod.parameters())
    torch.cuda.synchronize(device)
    peak_i = torch.cuda.max_memory_allocated(device) - before
    skip = {t.untyped_storage().data_ptr() for t in (y, inp) + (() if last else (grad,))}
    stash = {g.untyped_storage().data_ptr(): g.untyped_storage().nbytes()
             for group in groups for grads in group.get("grads") or () for g in grads
             if isinstance(g, torch.Tensor) and g.untyped_storage().data_ptr() not in skip}
    if last:
        if not y._is_view():
            y.detach_()
        del y
    torch.cuda.synchronize(device)
    delta = torch.cuda.memory_allocated(device) - before
    in_grad = inp.numel() * inp.element_size()
    kept = delta - in_grad - sum(stash.values()) + activations + (out_bytes if last else 0)
    input_workspace = max(0, peak_i - in_grad - sum(stash.values()))
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    stage_backward_weight(mod.parameters(), groups)
    torch.cuda.synchronize(device)
    weight_workspace = torch.cuda.max_memory_allocated(device) - start
    inp.grad = None
    return min(max(0, kept), activations), sum(stash.values()), input_workspace, weight_workspace


def worker(rank, world, args, port, results):
    try:
        import datetime

        import torch
        import torch.distributed as dist
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        from headroom import pipeline
        from headroom.torch import pipelining

        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        pp_group, dp_mesh = None, None
        if args.dp > 1:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            mesh = init_device_mesh("cuda", (args.dp, 2), mesh_dim_names=("dp", "pp"))
            pp_group, dp_mesh = mesh["pp"].get_group(), mesh["dp"]
        pp_rank = dist.get_rank(pp_group) if pp_group is not None else rank
        Stage = make_stage_class()
        model = build_model(args)
        dp_index = rank // 2 if args.dp > 1 else 0  # data-parallel replicas see different data
        gen = torch.Generator().manual_seed(1234 + dp_index)
        most = max(args.microbatches)
        x_all = torch.randint(0, VOCAB, (most, args.seq), generator=gen).to(device)
        y_all = torch.randint(0, VOCAB, (most, args.seq), generator=gen).to(device)
        rows, loss_log, sizes_of = [], {}, {}
        for kind in SCHEDULES_DP if args.dp > 1 else SCHEDULES_PP:
            v = 2 if kind in ("interleaved_1f1b", "zbv") else 1
            n = 2 * v
            bounds = [args.layers * i // n for i in range(n + 1)]
            for return_outputs in (True, False):
                for m in args.microbatches:
                    s = pipeline.schedule("one_f_one_b" if kind == "torch_1f1b" else kind, 2, m, chunks=v)
                    mine = sorted(s.placement.virtual_stage(pp_rank, c) for c in range(v))
                    mods = {st: copy.deepcopy(Stage(model, bounds[st], bounds[st + 1], st == 0, st == n - 1)).to(device)
                            for st in mine}
                    unsharded = 0  # parameters an UNSHARD gathers and holds for the step (the export's FSDP cells)
                    if dp_mesh is not None:
                        for mod in mods.values():
                            full = sum(p.numel() * p.element_size() for p in mod.parameters())
                            for layer in mod.layers:
                                fully_shard(layer, mesh=dp_mesh)
                            fully_shard(mod, mesh=dp_mesh)
                            unsharded += 0 if kind == "torch_1f1b" else full - full // args.dp
                    stages = [PipelineStage(mods[st], st, n, device, group=pp_group) for st in mine]
                    if kind == "torch_1f1b":
                        runtime = Schedule1F1B(stages[0], m, loss_fn=loss_fn)
                    else:
                        runtime = pipelining.build_schedule(s, stages, loss_fn=loss_fn)
                    x, y = x_all[:m], y_all[:m]
                    first, last = 0 in mine, n - 1 in mine
                    for step in range(2):  # step 0 warms up (shape inference, gradients, cuBLAS)
                        for st in stages:
                            st.output_chunks.clear()  # the previous step's outputs, as step() clears them
                        torch.cuda.synchronize(device)
                        dist.barrier()
                        resident = torch.cuda.memory_allocated(device)
                        torch.cuda.reset_peak_memory_stats(device)
                        losses = [] if last else None
                        t0 = time.perf_counter()
                        out = runtime.step(*((x,) if first else ()), target=y if last else None, losses=losses,
                                           return_outputs=return_outputs)
                        torch.cuda.synchronize(device)
                        step_ms = 1e3 * (time.perf_counter() - t0)
                        peak = torch.cuda.max_memory_allocated(device)
                        reserved = torch.cuda.max_memory_reserved(device)
                        del out
                    if last:
                        loss_log[f"{kind}|{m}|{return_outputs}"] = [float(t.detach()) for t in losses]
                    if v not in sizes_of:  # this layout's sizes: every rank measures its stages, all share
                        local = {st: stage_sizes(mods[st], st, n, args, device) for st in mine}
                        gathered = [None] * 2
                        fields = ("activations", "output", "workspace", "kept_for_weight", "weight_stash",
                                  "input_workspace", "weight_workspace")
                        dist.all_gather_object(gathered, {st: {f: getattr(b, f) for f in fields}
                                                          for st, b in local.items()}, group=pp_group)
                        merged = {st: b for g in gathered for st, b in g.items()}
                        sizes_of[v] = [pipeline.StageBytes(**merged[st]) for st in range(n)]
                    transfers = "grouped" if kind == "torch_1f1b" else None  # Schedule1F1B batches SEND_F + RECV_B
                    step_peak = pipelining.predict_peaks(s, sizes_of[v], return_outputs=return_outputs,
                                                         transfers=transfers)[pp_rank]
                    rows.append({"kind": kind, "m": m, "return_outputs": return_outputs, "rank": rank,
                                 "pp_rank": pp_rank, "stages": mine, "resident": resident, "unsharded": unsharded,
                                 "predicted": resident + unsharded + step_peak, "peak": peak, "reserved": reserved,
                                 "step_ms": step_ms})
                    del runtime, stages, mods
                    torch.cuda.empty_cache()
        dist.barrier()
        results.put(("ok", rank, rows, loss_log, torch.__version__, torch.cuda.get_device_name(device)))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - report anything, the parent decides
        results.put(("error", rank, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"))


def reference_losses(args, ms):
    """Per-micro-batch losses of the same modules chained on one GPU (cuda:0), for each m."""
    import torch
    Stage = make_stage_class()
    model = build_model(args).to("cuda:0")
    whole = Stage(model, 0, args.layers, True, True)
    out = {}
    gen = torch.Generator().manual_seed(1234)
    most = max(ms)
    x_all = torch.randint(0, VOCAB, (most, args.seq), generator=gen).to("cuda:0")
    y_all = torch.randint(0, VOCAB, (most, args.seq), generator=gen).to("cuda:0")
    with torch.no_grad():
        for k in range(most):
            out[k] = float(loss_fn(whole(x_all[k:k + 1]), y_all[k:k + 1]))
    del model, whole
    torch.cuda.empty_cache()
    return out


def plot(rows, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return f"no plot ({type(e).__name__}: {e})"
    kinds = sorted({r["kind"] for r in rows})
    fig, axes = plt.subplots(2, len(kinds), figsize=(4.5 * len(kinds), 7), squeeze=False)
    for col, kind in enumerate(kinds):
        for row, ro in enumerate((True, False)):
            ax = axes[row][col]
            for rank in sorted({r["rank"] for r in rows}):
                sel = sorted((r for r in rows if r["kind"] == kind and r["return_outputs"] == ro and r["rank"] == rank),
                             key=lambda r: r["m"])
                ms = [r["m"] for r in sel]
                line, = ax.plot(ms, [r["peak"] / 2**30 for r in sel], "o-", label=f"rank {rank} measured")
                ax.plot(ms, [r["predicted"] / 2**30 for r in sel], "x--", color=line.get_color(),
                        label=f"rank {rank} predicted")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{kind}, return_outputs={ro}", fontsize=9)
            ax.set_xlabel("micro-batches m")
            ax.set_ylabel("peak allocated (GiB)")
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def emit_skipped(reason, args):
    print(f"skipped: pipeline_torch_llama: {reason}")
    print(json.dumps({"bench": "pipeline_torch_llama", "dp": args.dp, "status": "skipped", "reason": reason}))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp", type=int, choices=(1, 2), default=1, help="data-parallel degree (2: 4 GPUs, FSDP2)")
    parser.add_argument("--microbatches", type=lambda s: [int(v) for v in s.split(",")], default=[2, 4, 8, 16])
    parser.add_argument("--seq", type=int, default=2048, help="tokens per micro-batch (one sequence)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--port", type=int, default=0, help="the ranks' TCP rendezvous (0: a free one)")
    args = parser.parse_args()
    if args.layers < 4 or args.layers % 4 or args.hidden % 256 or any(m < 2 for m in args.microbatches):
        parser.error("--layers a multiple of 4, --hidden a multiple of 256, every m >= 2 (interleaved needs m >= p)")
    world = 2 * args.dp
    try:
        import torch
        import torch.multiprocessing as mp
        import torch.distributed.pipelining  # noqa: F401
        import transformers  # noqa: F401
        from headroom.torch import pipelining  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return emit_skipped(f"cannot import torch / transformers / headroom ({type(e).__name__}: {e})", args)
    if not torch.cuda.is_available() or torch.cuda.device_count() < world:
        return emit_skipped(f"needs {world} GPUs, found {torch.cuda.device_count() if torch.cuda.is_available() else 0}",
                            args)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    t0 = time.monotonic()
    ranks = gather(mp.get_context("spawn"), worker, world, args, args.port, DEADLINE_S)
    got = ranks.got
    if ranks.errors or ranks.died or ranks.missing:
        reason = "; ".join(ranks.errors[:1] + ranks.died) or f"ranks {ranks.missing} did not finish in {DEADLINE_S} s"
        print(f"pipeline_torch_llama: FAILED: {reason}")
        print(json.dumps({"bench": "pipeline_torch_llama", "dp": args.dp, "status": "failed", "reason": reason}))
        return 1
    rows = sorted((r for g in got.values() for r in g[2]),
                  key=lambda r: (r["kind"], not r["return_outputs"], r["m"], r["rank"]))
    losses = {k: v for g in got.values() for k, v in g[3].items()}
    version, device = got[0][4], got[0][5]
    ref = reference_losses(args, args.microbatches) if args.dp == 1 else None
    loss_ok = None if ref is None else all(v == [ref[k] for k in range(len(v))] for v in losses.values())
    loss_diff = None if ref is None else max(abs(a - ref[k]) for v in losses.values() for k, a in enumerate(v))
    for r in rows:
        r["error_pct"] = 100.0 * (r["predicted"] - r["peak"]) / r["peak"]
    within = sum(abs(r["error_pct"]) <= 5.0 for r in rows)
    title = (f"LlamaForCausalLM (hidden {args.hidden}, {args.layers} layers, vocab {VOCAB}, bf16), "
             f"{args.seq} tokens per micro-batch, DP{args.dp} x PP2 on {world} x {device}, torch {version}")
    print(title)
    print(f"{'schedule':<17} {'ret_out':>7} {'m':>3} {'rank':>4} {'stages':>7} {'resident':>9} {'predicted':>10} "
          f"{'measured':>9} {'err %':>6} {'reserved':>9} {'ms':>7}   (GiB)")
    for r in rows:
        print(f"{r['kind']:<17} {str(r['return_outputs']):>7} {r['m']:>3} {r['rank']:>4} {str(r['stages']):>7} "
              f"{r['resident'] / 2**30:>9.3f} {r['predicted'] / 2**30:>10.3f} {r['peak'] / 2**30:>9.3f} "
              f"{r['error_pct']:>6.1f} {r['reserved'] / 2**30:>9.3f} {r['step_ms']:>7.1f}")
    print(f"within 5 %: {within}/{len(rows)} rows; losses equal to the single-GPU model: {loss_ok} "
          f"(max |diff| {loss_diff}); {time.monotonic() - t0:.0f} s")
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "pipeline_torch_llama" + ("_dp2" if args.dp > 1 else ""))
    picture = plot(rows, stem + ".png", title)
    summary = {"bench": "pipeline_torch_llama", "dp": args.dp, "status": "ok", "torch": version, "device": device,
               "gpus": world, "hidden": args.hidden, "layers": args.layers, "vocab": VOCAB, "seq": args.seq,
               "within_5pct": within, "rows_total": len(rows), "losses_equal": loss_ok, "loss_max_diff": loss_diff,
               "plot": picture, "rows": rows}
    with open(stem + ".json", "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
