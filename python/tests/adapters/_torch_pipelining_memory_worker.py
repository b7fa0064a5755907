# SPDX-License-Identifier: Apache-2.0
"""One of the 2 ranks of test_torch_pipelining_memory: torch's pipeline runtime on gloo (CPU) runs
a small transformers Llama split as bench/pipeline_torch_llama.py splits it (embedding + half the
layers | the rest + norm + LM head; 4 virtual stages for interleaved 1F1B and ZBV), and each step's
peak of live CPU tensor bytes (the profiler's allocation events, the CPU analogue of
max_memory_allocated) is set against headroom.torch.pipelining.predict_peaks.

    python _torch_pipelining_memory_worker.py RANK PORT OUT_DIR

Writes OUT_DIR/rank{RANK}.json: one {"kind", "m", "return_outputs", "stages", "measured",
"predicted", "predicted_no_split"} per case; "predicted_no_split" is the prediction from sizes
with the split backward's terms at 0 (kept_for_weight, weight_stash, input_workspace,
weight_workspace: what the model counted before it followed torch's split backward).
"""
import copy
import importlib.util
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.profiler import ProfilerActivity, profile

from _ranks import gloo_runs_local_stage_edges  # this folder: the worker runs as a script from it

from headroom import pipeline
from headroom.torch import pipelining

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "pipeline_torch_llama.py")
VOCAB, HIDDEN, LAYERS, SEQ = 4096, 64, 4, 256
KINDS = ("torch_1f1b", "interleaved_1f1b", "zb_h1") + (("zbv",) if gloo_runs_local_stage_edges() else ())
CASES = [(kind, m, ro) for kind in KINDS for m in (2, 4) for ro in (True, False)]


def load_bench():
    spec = importlib.util.spec_from_file_location("pipeline_torch_llama", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def build_model():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=3 * HIDDEN, num_hidden_layers=LAYERS,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=SEQ,
                         tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def live_peak(fn):
    """(result of fn, peak of live CPU bytes above the start, live bytes at the end): the
    profiler's allocation and free events in time order."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = sorted((e.start_ns(), i, e.nbytes()) for i, e in enumerate(prof.profiler.kineto_results.events())
                    if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
    live = peak = 0
    for _, _, n in events:
        live += n
        peak = max(peak, live)
    return result, peak, live


def workspace(mod, first, last, loss_fn):
    """Temporaries one computation of the stage allocates and frees within itself, above what the
    model counts (the bench's rule, with the CPU allocator): forward above what it holds after;
    backward above the input's gradient. The second of two passes (gradients allocated)."""
    g = torch.Generator().manual_seed(5)
    inp = (torch.randint(0, VOCAB, (1, SEQ), generator=g) if first
           else torch.randn(1, SEQ, HIDDEN, generator=g).requires_grad_())
    target = torch.randint(0, VOCAB, (1, SEQ), generator=g)
    for _ in range(2):
        def fwd():
            y = mod(inp)
            return y, (loss_fn(y, target) if last else None)
        (y, loss), peak_f, held_f = live_peak(fwd)
        grad = None if last else torch.randn_like(y)
        _, peak_b, _ = live_peak(lambda: torch.autograd.backward(loss if last else y, None if last else grad))
        in_grad = 0 if first else inp.numel() * inp.element_size()
        inp.grad = None
        del y, loss, grad
    return max(0, peak_f - held_f, peak_b - in_grad)


def split_workspaces(mod, first, last, loss_fn, whole, stash):
    """(input_workspace, weight_workspace): the peak of torch's input half (stage_backward_input)
    above its start, less what the model has it allocate (the input gradient and the weight
    stash), and the peak of its weight half (stage_backward_weight) above its start. On stage 0
    torch skips the input half and runs the whole backward at W. The second of two passes."""
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
    if first:
        return 0, whole
    g = torch.Generator().manual_seed(5)
    inp = torch.randn(1, SEQ, HIDDEN, generator=g).requires_grad_()
    target = torch.randint(0, VOCAB, (1, SEQ), generator=g)
    for _ in range(2):
        y = mod(inp)
        roots = (loss_fn(y, target),) if last else (y,)
        grads = None if last else [torch.randn_like(y)]
        (_, groups), peak_i, _ = live_peak(lambda: stage_backward_input(roots, grads, [inp], mod.parameters()))
        del y, roots, grads
        _, peak_w, _ = live_peak(lambda: stage_backward_weight(mod.parameters(), groups))
        inp.grad = None
        del groups
    return max(0, peak_i - inp.numel() * inp.element_size() - stash), peak_w


def sizes_of(bench, model, n):
    """Every virtual stage's StageBytes: headroom.torch.pipelining.stage_bytes on copies of the
    stages (on the CPU, where the runtime runs), the workspace from the CPU allocator."""
    Stage = bench.make_stage_class()
    bounds = [LAYERS * i // n for i in range(n + 1)]
    mods = [copy.deepcopy(Stage(model, bounds[s], bounds[s + 1], s == 0, s == n - 1)) for s in range(n)]
    tokens = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(3))
    target = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(4))
    measured = pipelining.stage_bytes(mods, tokens, loss_fn=bench.loss_fn, target=target)
    out = []
    for s, b in enumerate(measured):
        ws = workspace(copy.deepcopy(mods[s]), s == 0, s == n - 1, bench.loss_fn)
        iws, wws = split_workspaces(copy.deepcopy(mods[s]), s == 0, s == n - 1, bench.loss_fn, ws, b.weight_stash)
        out.append(pipeline.StageBytes(activations=b.activations, output=b.output, weight_stash=b.weight_stash,
                                       kept_for_weight=b.kept_for_weight, workspace=ws, input_workspace=iws,
                                       weight_workspace=wws))
    return out


def main():
    rank, port, out_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=120))
    bench = load_bench()
    Stage = bench.make_stage_class()
    model = build_model()
    gen = torch.Generator().manual_seed(1234)
    x_all = torch.randint(0, VOCAB, (4, SEQ), generator=gen)
    y_all = torch.randint(0, VOCAB, (4, SEQ), generator=gen)
    sizes = {v: sizes_of(bench, model, 2 * v) for v in (1, 2)}
    rows = []
    for kind, m, return_outputs in CASES:
        v = 2 if kind in ("interleaved_1f1b", "zbv") else 1
        n = 2 * v
        bounds = [LAYERS * i // n for i in range(n + 1)]
        s = pipeline.schedule("one_f_one_b" if kind == "torch_1f1b" else kind, 2, m, chunks=v)
        mine = sorted(s.placement.virtual_stage(rank, c) for c in range(v))
        mods = {st: copy.deepcopy(Stage(model, bounds[st], bounds[st + 1], st == 0, st == n - 1)) for st in mine}
        stages = [PipelineStage(mods[st], st, n, torch.device("cpu")) for st in mine]
        runtime = (Schedule1F1B(stages[0], m, loss_fn=bench.loss_fn) if kind == "torch_1f1b"
                   else pipelining.build_schedule(s, stages, loss_fn=bench.loss_fn))
        first, last = 0 in mine, n - 1 in mine
        x, y = x_all[:m], y_all[:m]
        for step in range(2):  # step 0 warms up (shapes, gradients)
            for st in stages:
                st.output_chunks.clear()
            dist.barrier()

            def run():
                return runtime.step(*((x,) if first else ()), target=y if last else None,
                                    losses=[] if last else None, return_outputs=return_outputs)
            out, peak, _ = live_peak(run)
            del out
        transfers = "grouped" if kind == "torch_1f1b" else None
        no_split = [pipeline.StageBytes(activations=b.activations, output=b.output, workspace=b.workspace)
                    for b in sizes[v]]
        rows.append({"kind": kind, "m": m, "return_outputs": return_outputs, "stages": mine, "measured": peak,
                     "predicted": pipelining.predict_peaks(s, sizes[v], return_outputs=return_outputs,
                                                           transfers=transfers)[rank],
                     "predicted_no_split": pipelining.predict_peaks(s, no_split, return_outputs=return_outputs,
                                                                    transfers=transfers)[rank]})
        del runtime, stages, mods
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rows": rows, "sizes": {v: [repr(b) for b in bs] for v, bs in sizes.items()}}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
