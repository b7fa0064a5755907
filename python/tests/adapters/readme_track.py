# SPDX-License-Identifier: Apache-2.0
"""README's PyTorch track, walked as a user would after `pip install .` (test_readme_track.py runs
this file with a fresh install of the package first on the path):

1. README's Python blocks as written (the Megatron-FSDP plan of a module, CP split / reassembly);
2. on 2 gloo processes: CP split and `cp.gather` over the group, and a torch pipeline
   (`torch.distributed.pipelining`) running a headroom schedule loaded from its compute-only CSV,
   its loss and gradients equal to the unpipelined model's.

    python readme_track.py README.md WORKDIR
"""
import os
import re
import sys

import torch
import torch.distributed as dist
import spawned


def readme_blocks(readme):
    text = open(readme).read()
    return re.findall(r"```python\n(.*?)^```", text, re.S | re.M)


def model(seed=3):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))


def worker(rank, world, workdir):
    dist.init_process_group("gloo", init_method=f"file://{workdir}/store", rank=rank, world_size=world)
    try:
        cp_over_the_group(rank, world)
        pipeline_from_a_headroom_schedule(rank, world, workdir)
    finally:
        dist.destroy_process_group()


def cp_over_the_group(rank, world):
    import headroom.cp
    from headroom.torch import cp

    x = torch.randn(40, 8, generator=torch.Generator().manual_seed(1))   # the same batch on every rank
    part = cp.Partition.from_raw([0, 7, 17, 17, 40], cp_size=world, cp_rank=rank)
    local = part.pad_split(x).requires_grad_()
    full = cp.gather(local, part)                                          # over the default group
    to_padded = torch.from_numpy(headroom.cp.pad([0, 7, 17, 17, 40], "dual_chunk", world).raw_to_padded())
    assert full.shape[0] == part.global_rows and torch.equal(full[to_padded], x)   # raw rows in place
    assert int((full != 0).any(dim=1).sum()) == x.shape[0]                        # pads are zeros
    full.sum().backward()                                                  # the adjoint: x cp for a replicated loss
    assert torch.equal(local.grad, torch.full_like(local, world))


def pipeline_from_a_headroom_schedule(rank, world, workdir):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    from headroom import pipeline

    microbatches = 4
    s = pipeline.schedule("one_f_one_b", stages=world, microbatches=microbatches)
    csv = os.path.join(workdir, "schedule.csv")
    if rank == 0:
        with open(csv, "w") as f:
            f.write(pipeline.to_csv(s, compute_only=True))               # PyTorch / torchtitan schedule CSV
    dist.barrier()

    full = model()
    layers = list(full.children())
    cut = len(layers) // world
    mine = torch.nn.Sequential(*layers[rank * cut:(rank + 1) * cut] if rank < world - 1 else layers[rank * cut:])
    stage = PipelineStage(mine, rank, world, torch.device("cpu"))
    loss_fn = torch.nn.functional.mse_loss
    sched = _PipelineScheduleRuntime([stage], microbatches, loss_fn=loss_fn)
    sched._load_csv(csv, format="compute_only")

    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
    losses = []
    if rank == 0:
        sched.step(x)
    else:
        sched.step(target=y, losses=losses)

    ref = model()
    ref_losses = [loss_fn(ref(xm), ym) for xm, ym in zip(x.chunk(microbatches), y.chunk(microbatches))]
    (sum(ref_losses) / microbatches).backward()                            # the schedule scales grads by 1/m
    ref_layers = list(ref.children())
    ref_mine = ref_layers[rank * cut:(rank + 1) * cut] if rank < world - 1 else ref_layers[rank * cut:]
    for a, b in zip(mine.parameters(), torch.nn.Sequential(*ref_mine).parameters()):
        torch.testing.assert_close(a.grad, b.grad)
    if rank == world - 1:
        torch.testing.assert_close(torch.stack(losses), torch.stack(ref_losses))


def main(readme, workdir):
    import headroom

    print(f"headroom {headroom.__version__} from {os.path.dirname(headroom.__file__)}")
    for i, code in enumerate(readme_blocks(readme)):
        cwd = os.path.join(workdir, f"block{i}")
        os.makedirs(cwd, exist_ok=True)
        here = os.getcwd()
        os.chdir(cwd)
        try:
            exec(compile(code, f"{readme} (python block {i + 1})", "exec"), {"__name__": "__readme__"})
        finally:
            os.chdir(here)
        print(f"README python block {i + 1}: ran")
    spawned.spawn(worker, args=(2, workdir), nprocs=2)
    print("cp.gather over gloo and a torch pipeline from a headroom schedule's CSV: ran")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
