# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.pipelining.predict_peaks against torch's own pipeline runtime, on the CPU: two
gloo processes run a small transformers Llama (bench/pipeline_torch_llama.py's split) under torch's
Schedule1F1B and headroom's interleaved 1F1B, ZB-H1 and ZBV through the export, m in {2, 4},
step(return_outputs=True | False); each rank's peak of live CPU tensor bytes over one step (the
profiler's allocation events) equals the prediction within TOLERANCE. The prediction without what
torch's split backward keeps from I to W (kept_for_weight, weight_stash, and the input,
output and output gradient the input half keeps) misses it on the zero-bubble schedules.
"""
import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining", reason="this torch has no torch.distributed.pipelining")
pytest.importorskip("transformers")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from _ranks import gloo_runs_local_stage_edges, run_ranks  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "_torch_pipelining_memory_worker.py")
# of the measured peak: torch 2.15's runtime, worst row 2.6 % under (ZBV rank 1, m = 4); torch 2.11's
# runtime (the one without local stage edges, _ranks.py) keeps less of rank 0's forward outputs, worst
# row +3.12 % over (interleaved 1F1B rank 0, m = 2: three 64 KiB activations; 2026-11-29, CPU): the
# tolerance bench/pipeline_torch_llama.py holds every torch to
ZBV = gloo_runs_local_stage_edges()  # else this torch's runtime cannot run a V over gloo (_ranks.py)
TOLERANCE = 0.03 if ZBV else 0.05


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("ppmem")
    run_ranks(WORKER, 2, str(out))
    got = []
    for r in range(2):
        for row in json.load(open(out / f"rank{r}.json"))["rows"]:
            got.append(dict(row, rank=r))
    return got


def error(row, key="predicted"):
    return (row[key] - row["measured"]) / row["measured"]


def test_prediction_equals_torchs_runtime_on_every_rank(rows):
    assert len(rows) == 2 * (16 if ZBV else 12)
    bad = [f"{r['kind']} m={r['m']} return_outputs={r['return_outputs']} rank {r['rank']}: predicted {r['predicted']}, "
           f"measured {r['measured']} ({100 * error(r):+.2f} %)" for r in rows if abs(error(r)) > TOLERANCE]
    assert not bad, "\n".join(bad)


def test_the_split_backward_terms_are_needed(rows):
    """Without them the zero-bubble rows miss (by one logits gradient and the retained graph on
    the last stage); the full-backward schedules do not change."""
    for r in rows:
        if r["kind"] in ("torch_1f1b", "interleaved_1f1b"):
            assert r["predicted_no_split"] == r["predicted"], r
    missed = [r for r in rows if r["kind"] in ("zb_h1", "zbv") and error(r, "predicted_no_split") < -TOLERANCE]
    assert {r["kind"] for r in missed} == ({"zb_h1", "zbv"} if ZBV else {"zb_h1"}), missed


def test_zbv_is_measured(rows):
    if not ZBV:
        pytest.skip(f"torch {torch.__version__}'s runtime cannot run a V's local stage edge over gloo (_ranks.py)")
    assert sum(r["kind"] == "zbv" for r in rows) == 2 * 4
