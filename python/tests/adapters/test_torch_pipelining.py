# SPDX-License-Identifier: Apache-2.0
"""headroom schedules run by torch's _PipelineScheduleRuntime (headroom.torch.pipelining): every
generator, exported in full (headroom's transfers, waits and gradient reductions) and compute-only
(torch's lowering), on gloo with pipelines of 2 and 4 CPU processes and nn.Linear stages;
gradients and losses bit-equal to the unpipelined reference. One 4-process world runs every case
(the pipelines of 2 on its two halves at once).
"""
import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining", reason="this torch has no torch.distributed.pipelining")
import torch.distributed as dist  # noqa: E402

from headroom import pipeline  # noqa: E402
from headroom.torch import pipelining  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from _ranks import V_SHAPES, gloo_runs_local_stage_edges, run_ranks  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "_torch_pipelining_worker.py")


def cases():
    """Every case this torch's runtime can run over gloo (the V shapes only where
    gloo_runs_local_stage_edges())."""
    out = []
    for p in (2, 4):
        kinds = [("gpipe", 2 * p, 1), ("one_f_one_b", 2 * p, 1), ("zb_h1", 2 * p, 1), ("gpipe", 2 * p, 2),
                 ("interleaved_1f1b", 2 * p, 2), ("interleaved_zb", 2 * p, 2), ("zbv", 2 * p, 2),
                 ("dualpipe_v", 2 * p, 2), ("one_f_one_b", 1, 1), ("zbv", 3, 2)]
        out += [{"p": p, "kind": k, "m": m, "v": v, "content": c} for k, m, v in kinds for c in ("full", "compute_only")]
        out.append({"p": p, "kind": "one_f_one_b", "m": 4, "v": 1, "content": "no_reduce"})
        out.append({"p": p, "kind": "interleaved_zb", "m": 2 * p, "v": 2, "content": "no_reduce"})
    return [c for c in out if c["kind"] not in V_SHAPES or gloo_runs_local_stage_edges()]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{case index: [result of group rank r]}: one 4-process gloo world runs every case."""
    out = tmp_path_factory.mktemp("pp")
    run_ranks(WORKER, 4, json.dumps(cases()), str(out))
    by_case = {}
    for r in range(4):
        for res in json.load(open(out / f"rank{r}.json")):
            by_case.setdefault(res["index"], {})[res["group_rank"]] = res
    return {i: [ranks[g] for g in sorted(ranks)] for i, ranks in by_case.items()}


def test_every_generator_runs_bit_equal_in_torchs_runtime(results):
    for i, case in enumerate(cases()):
        if case["content"] == "no_reduce":
            continue
        assert len(results[i]) == case["p"], case
        for r, res in enumerate(results[i]):
            assert res["error"] is None, f"{case} rank {r}:\n{res['error']}"
            assert res["grads_equal"], f"{case} rank {r}: gradients differ from the reference"
            if res["losses_equal"] is not None:
                assert res["losses_equal"], f"{case} rank {r}: losses differ from the reference"
        assert any(res["losses_equal"] is not None for res in results[i]), case  # the last stage compared them


def test_v_shapes_run_in_torchs_runtime(results):
    """ZBV and DualPipeV (two adjacent stages on one rank) ran above, unless this torch's runtime
    cannot open a stage's edge to its own rank over gloo."""
    if not gloo_runs_local_stage_edges():
        pytest.skip(f"torch {torch.__version__}'s runtime sends each stage's first message to the next stage's rank, "
                    "itself for a V's middle edge: gloo cannot (NCCL can: bench/pipeline_torch_llama.py)")
    assert {c["kind"] for c in cases()} >= set(V_SHAPES)


def test_gradient_scale_is_checked(results):
    """Without REDUCE_GRAD the runtime never divides by m: the comparison above must see it."""
    for i, case in enumerate(cases()):
        if case["content"] != "no_reduce":
            continue
        for r, res in enumerate(results[i]):
            assert res["error"] is None, f"{case} rank {r}:\n{res['error']}"
            assert not res["grads_equal"], f"{case} rank {r}: m-times gradients passed the check"
            assert res["grads_equal_unscaled"], f"{case} rank {r}: expected the unscaled sum"


def test_export_follows_this_torchs_lowering():
    """The full export equals what torch's own passes make of headroom's rows: the waits of
    _add_wait_send and the cells of _add_reduce_grad / _add_unshard_reshard, in their places."""
    from torch.distributed.pipelining import schedules as ts
    cells = pipelining.runtime_cells()
    if not cells["send_waits"] or not hasattr(ts, "_add_wait_send"):
        pytest.skip("this torch's runtime has no WAIT_SEND_* cells")
    for kind, p, m, v in [("one_f_one_b", 2, 4, 1), ("zb_h1", 3, 6, 1), ("interleaved_1f1b", 2, 4, 2), ("zbv", 2, 4, 2),
                          ("dualpipe_v", 2, 4, 2)]:
        s = pipeline.schedule(kind, p, m, chunks=v)
        for fsdp in (False, True):
            full = pipeline.to_pytorch(s, fsdp=fsdp, **cells)
            compute = pipeline.to_pytorch(s, compute_only=True)
            for r in range(p):
                # torch's per-rank passes on the computations: the same cells in the same order
                theirs = [ts._Action.from_str(c) for c in compute[r]]
                if fsdp:
                    theirs = ts._add_unshard_reshard(theirs, 3)
                theirs = [str(a) for a in ts._add_reduce_grad(theirs, m)]
                ours = [c for c in full[r] if "SEND" not in c and "RECV" not in c]
                assert ours == theirs, (kind, fsdp, r)
            # torch's wait pass on the rows without their waits puts them where ours are
            waited = ts._add_wait_send({r: [ts._Action.from_str(c) for c in full[r] if "WAIT_SEND" not in c]
                                        for r in range(p)})
            for r in range(p):
                assert [str(a) for a in waited[r]] == full[r], (kind, fsdp, r)


def test_forward_only_and_bad_stages_are_refused():
    with pytest.raises(Exception, match="forward-only; PyTorch's _PipelineScheduleRuntime refuses"):
        pipelining.export(pipeline.schedule("forward_only", 2, 2))
    s = pipeline.schedule("one_f_one_b", 2, 2)
    with pytest.raises(ValueError, match=r"stages = \[\]"):
        pipelining.build_schedule(s, [])
