# SPDX-License-Identifier: Apache-2.0
"""One of the 4 ranks of test_torch_pipelining: runs headroom schedules in torch's
_PipelineScheduleRuntime on gloo (CPU) and compares each rank's gradients and losses with the
unpipelined reference. Pipelines of 4 use the whole world; pipelines of 2 run on ranks {0, 1}
and {2, 3} at once, each half taking every other such case.

    python _torch_pipelining_worker.py RANK PORT CASES_JSON OUT_DIR

CASES_JSON: a list of {"p" (2 or 4), "kind", "m", "v", "content" ("full" | "compute_only" |
"no_reduce")}. Writes OUT_DIR/rank{RANK}.json: one {"index", "group_rank", "grads_equal",
"grads_equal_unscaled", "losses_equal", "error"} per case it ran. "no_reduce" loads the full
export with its REDUCE_GRAD cells removed: it must come out m times too large (the check can
fail).
"""
import json
import os
import sys
import tempfile
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as torch_schedules

from headroom import pipeline
from headroom.torch import pipelining

D, ROWS = 8, 2  # features, rows per micro-batch


def make_stage(index: int) -> torch.nn.Module:
    torch.manual_seed(1000 + index)
    return torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.Tanh())


def data(m: int):
    g = torch.Generator().manual_seed(7)
    return torch.randn(m * ROWS, D, generator=g), torch.randn(m * ROWS, D, generator=g)


def reference(s, x, y, loss_fn):
    """Per-stage gradients folded in the order the schedule runs that stage's backwards (torch
    accumulates .grad in that order), unscaled and scaled by 1/m; the losses."""
    shape = s.shape
    n, m = shape.virtual_stages(), shape.microbatches
    mods = [make_stage(i) for i in range(n)]
    per_mb, losses = [], []
    for xk, yk in zip(x.chunk(m), y.chunk(m)):
        for mod in mods:
            mod.zero_grad(set_to_none=True)
        h = xk
        for mod in mods:
            h = mod(h)
        loss = loss_fn(h, yk)
        loss.backward()
        losses.append(loss.detach())
        per_mb.append([[p.grad.clone() for p in mod.parameters()] for mod in mods])
    order = {st: [] for st in range(n)}  # stage -> micro-batches in the order their weight grads run
    for r in range(shape.stages):
        for a in s.actions(r):
            if a.kind in ("backward", "backward_weight"):
                order[a.stage].append(a.microbatch)
            elif a.kind == "overlapped":
                order[a.backward_stage].append(a.backward_microbatch)
    unscaled = {}
    for st in range(n):
        acc = None
        for k in order[st]:
            g = per_mb[k][st]
            acc = [t.clone() for t in g] if acc is None else [a + b for a, b in zip(acc, g)]
        unscaled[st] = acc
    scaled = {st: [t / m for t in g] for st, g in unscaled.items()}
    return unscaled, scaled, losses


def strip_reduce(text: str) -> str:
    rows = [[c for c in line.split(",") if "REDUCE_GRAD" not in c] for line in text.splitlines()]
    return "".join(",".join(r) + "\r\n" for r in rows)


def run_case(case, rank, group):
    s = pipeline.schedule(case["kind"], case["p"], case["m"], chunks=case["v"])
    shape = s.shape
    loss_fn = torch.nn.MSELoss()
    x, y = data(shape.microbatches)
    mine = sorted(s.placement.virtual_stage(rank, c) for c in range(shape.chunks))
    mods = {st: make_stage(st) for st in mine}
    stages = [PipelineStage(mods[st], st, shape.virtual_stages(), torch.device("cpu"), group=group) for st in mine]
    if case["content"] == "no_reduce":
        runtime = torch_schedules._PipelineScheduleRuntime(stages, shape.microbatches, loss_fn=loss_fn)
        fd, path = tempfile.mkstemp(suffix=".csv")
        with os.fdopen(fd, "w", newline="") as f:
            f.write(strip_reduce(pipelining.export(s)))
        runtime._load_csv(path, format="compute_comms")
        os.unlink(path)
    else:
        runtime = pipelining.build_schedule(s, stages, loss_fn=loss_fn, compute_only=case["content"] == "compute_only")
    first, last = 0 in mine, shape.virtual_stages() - 1 in mine
    losses = [] if last else None
    args = (x,) if first else ()
    runtime.step(*args, target=y if last else None, losses=losses)
    unscaled, scaled, ref_losses = reference(s, x, y, loss_fn)
    got = {st: [p.grad for p in mods[st].parameters()] for st in mine}
    same = lambda a, b: all(torch.equal(u, v) for u, v in zip(a, b))  # noqa: E731
    return {
        "grads_equal": all(same(got[st], scaled[st]) for st in mine),
        "grads_equal_unscaled": all(same(got[st], unscaled[st]) for st in mine),
        "losses_equal": None if not last else all(torch.equal(a.detach(), b) for a, b in zip(losses, ref_losses))
        and len(losses) == shape.microbatches,
    }


def main():
    rank, port = int(sys.argv[1]), sys.argv[2]
    cases, out_dir = json.loads(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4,
                            timeout=timedelta(seconds=60))
    halves = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    results = []
    for p in (2, 4):
        group = halves[rank // 2] if p == 2 else dist.group.WORLD
        mine = [i for i, c in enumerate(cases) if c["p"] == p and (p == 4 or i % 2 == rank // 2)]
        for i in mine:
            res = {"index": i, "group_rank": dist.get_rank(group)}
            try:
                res.update(run_case(cases[i], dist.get_rank(group), group), error=None)
            except Exception:  # reported per case; the other ranks may then fail their case too
                res["error"] = traceback.format_exc()
                print(f"rank {rank}, case {i} {cases[i]}:\n{res['error']}", file=sys.stderr, flush=True)
            results.append(res)
            dist.barrier(group=group)
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
