# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.pipelining's prediction path on CPU: stage sizes from one forward on the meta
device, torch's presets, step()'s merged result; and bench/pipeline_torch_llama.py's Llama split
(its stages chained equal the model) measured on the meta device."""
import importlib.util
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining", reason="this torch has no torch.distributed.pipelining")

import headroom  # noqa: E402
from headroom import pipeline  # noqa: E402
from headroom.torch import pipelining  # noqa: E402

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "pipeline_torch_llama.py")


def test_stage_bytes_on_the_meta_device():
    d, rows = 8, 4
    mods = [torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.Tanh()).to("meta"),
            torch.nn.Sequential(torch.nn.Linear(2 * d, d), torch.nn.ReLU(), torch.nn.Linear(d, 3)).to("meta")]
    x = torch.empty(rows, d, device="meta")
    sizes = pipelining.stage_bytes(mods, x)
    f = 4  # float32
    # stage 0: Linear saves its input (excluded) and weight (a parameter); Tanh saves its result,
    # the stage's output: nothing else is held for the backward
    assert (sizes[0].activations, sizes[0].output) == (0, rows * 2 * d * f)
    assert sizes[0].parameters == 2 * (d * 2 * d + 2 * d) * f
    # stage 1: ReLU's result, saved by ReLU and by the last Linear: one storage, counted once
    assert sizes[1].output == rows * 3 * f
    assert sizes[1].activations == rows * d * f
    # with the loss: cross_entropy saves its log-softmax on the last stage
    target = torch.empty(rows, dtype=torch.long, device="meta")
    with_loss = pipelining.stage_bytes(mods, x, loss_fn=torch.nn.functional.cross_entropy, target=target)
    assert with_loss[1].activations > sizes[1].activations and with_loss[0] == sizes[0]


def test_torch_presets_and_merged_result():
    s = pipeline.schedule("one_f_one_b", 2, 4)
    each = pipeline.StageBytes(activations=100, output=10, parameters=1000)
    plan = pipelining.predict_memory(s, each, return_outputs=False)
    assert plan.outputs == "kept_until_backward" and plan.retention == "reduced" and plan.transfers == "one_by_one"
    assert plan == plan and [r.peak for r in plan.ranks] == [
        r.peak for r in pipeline.predict_memory(s, each, "reduced", "kept_until_backward").ranks]
    kept = pipelining.predict_memory(s, each, return_outputs=True)
    peaks = pipelining.predict_peaks(s, each, return_outputs=True)
    # the last rank keeps its 4 outputs, then step() concatenates them: one more copy
    assert kept.rank(1).held_at_end == 40 and peaks[1] == max(kept.rank(1).peak, 40 + 40)
    assert pipelining.predict_peaks(s, each, return_outputs=False) == [r.peak for r in plan.ranks]
    with pytest.raises(ValueError, match="framework = 'jax'"):
        pipeline.predict_memory(s, each, framework="jax")
    # a computation's workspace is live only while it runs
    ws = pipeline.StageBytes(activations=100, output=10, workspace=1000)
    assert [r.peak for r in pipeline.predict_memory(s, ws).ranks] == [
        r.peak + 1000 for r in pipeline.predict_memory(s, pipeline.StageBytes(activations=100, output=10)).ranks]
    assert [r.held_at_end for r in pipeline.predict_memory(s, ws, "all").ranks] == [0, 40]
    with pytest.raises(headroom.invalid_argument, match="workspace"):
        pipeline.StageBytes(workspace=-1)


def test_runtime_cells_name_this_torchs_types():
    from torch.distributed.pipelining import schedules as ts
    cells = pipelining.runtime_cells()
    assert cells["send_waits"] == hasattr(ts._ComputationType, "WAIT_SEND_F")
    assert cells["reduce_grad_waits"] == hasattr(ts._ComputationType, "WAIT_REDUCE_GRAD")
    text = pipelining.export(pipeline.schedule("zb_h1", 2, 2))
    for line in text.splitlines():
        assert all(ts._Action.from_str(c) is not None for c in line.split(","))


def test_llama_bench_split_equals_the_model_and_measures_on_meta():
    transformers = pytest.importorskip("transformers")  # noqa: F841
    spec = importlib.util.spec_from_file_location("pipeline_torch_llama", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    class Args:
        hidden, layers, seq = 256, 4, 16

    model = bench.build_model(Args).float()
    Stage = bench.make_stage_class()
    parts = [Stage(model, 0, 2, True, False), Stage(model, 2, 4, False, True)]
    tokens = torch.randint(0, bench.VOCAB, (1, Args.seq))
    with torch.no_grad():
        chained = parts[1](parts[0](tokens))
        whole = model(tokens).logits
    assert torch.allclose(chained, whole, atol=1e-5, rtol=1e-4)
    # the prediction path as the bench would use it without a GPU: sizes on the meta device
    meta = [Stage(model, 0, 2, True, False), Stage(model, 2, 4, False, True)]
    import copy
    meta = [copy.deepcopy(m).to("meta") for m in meta]
    sizes = pipelining.stage_bytes(meta, tokens.to("meta"), loss_fn=bench.loss_fn,
                                   target=torch.zeros(1, Args.seq, dtype=torch.long, device="meta"))
    assert sizes[0].output == Args.seq * Args.hidden * 4
    assert sizes[1].output == Args.seq * bench.VOCAB * 4
    assert sizes[0].activations > 0 and sizes[1].activations > sizes[1].output  # the loss's log-softmax
    for kind, v in (("zb_h1", 1), ("zbv", 2)):
        s = pipeline.schedule(kind, 2, 4, chunks=v)
        each = sizes if v == 1 else [sizes[0], sizes[1], sizes[1], sizes[1]]
        peaks = pipelining.predict_peaks(s, each, return_outputs=True)
        assert len(peaks) == 2 and all(p > 0 for p in peaks)


def test_stage_bytes_measure_torchs_split_backward():
    """What torch's input half keeps for its weight half, on the meta device: the graph below the
    weight nodes (ReLU's result, read by the last Linear's weight gradient) and the gradients that
    reached them; the loss's log-softmax goes at I. Stage 0's input half is skipped: all kept."""
    d, rows, f = 8, 4, 4
    mods = [torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.Tanh()).to("meta"),
            torch.nn.Sequential(torch.nn.Linear(2 * d, d), torch.nn.ReLU(), torch.nn.Linear(d, 3)).to("meta")]
    x = torch.empty(rows, d, device="meta")
    target = torch.empty(rows, dtype=torch.long, device="meta")
    sizes = pipelining.stage_bytes(mods, x, loss_fn=torch.nn.functional.cross_entropy, target=target)
    assert sizes[0].kept_for_weight == sizes[0].activations and sizes[0].weight_stash == 0
    assert sizes[1].kept_for_weight == rows * d * f                   # ReLU's result
    assert sizes[1].activations > sizes[1].kept_for_weight           # + the log-softmax, freed at I
    assert sizes[1].weight_stash == rows * 3 * f + rows * d * f     # d(logits) and d(first Linear's output)
    assert all(b.kept_for_weight == b.weight_stash == 0 for b in pipelining.stage_bytes(mods, x))  # no loss: off
    with pytest.raises(ValueError, match="without loss_fn"):
        pipelining.stage_bytes(mods, x, split_backward=True)


def test_split_backward_terms_in_the_model():
    """ZB-H1, p = 2, m = 1: the last stage runs F0 I0 W0. kept_for_weight moves that part of the
    stash's release from I to W; I and W have their own workspaces; under torch's lifetime the
    input stays until W."""
    s = pipeline.schedule("zb_h1", 2, 1)
    base = dict(activations=1000, output=10)
    plain = pipelining.predict_memory(s, pipeline.StageBytes(**base), return_outputs=False)
    # rank 1 at I0: input 10 + output 10 + stash 1000 + grad_input 10 = 1030
    assert plain.rank(1).peak == 1030
    split = dict(base, kept_for_weight=600, weight_stash=300, input_workspace=200)
    kept = pipelining.predict_memory(s, pipeline.StageBytes(**split, weight_workspace=2000), return_outputs=False)
    # W0: input 10 + kept 600 + weight stash 300 + W's workspace 2000 (I0: 1030 + 300 + 200)
    assert (kept.rank(1).peak, kept.rank(1).held_at_end) == (10 + 600 + 300 + 2000, 0)
    kept = pipelining.predict_memory(s, pipeline.StageBytes(**split, workspace=5000), return_outputs=False)
    assert kept.rank(1).peak == 1020 + 5000  # at F0; I0 (1530) and W0 (910) have their own workspaces
    assert pipelining.predict_memory(s, pipeline.StageBytes(**split), return_outputs=False).rank(1).peak == 1530
    with pytest.raises(headroom.invalid_argument, match="kept_for_weight = 2000 bytes, expected at most activations = 1000"):
        pipeline.StageBytes(**base, kept_for_weight=2000)
