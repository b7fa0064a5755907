# SPDX-License-Identifier: Apache-2.0
"""Megatron-FSDP 0.6.1 itself, trained on CPU (gloo, 2 ranks, ZeRO-3, fsdp_double_buffer) with
torch.cuda's stream, event and device calls stubbed: the real allocate / free sequence of its
buffers through headroom's PoolAllocator, against its own MaxPoolAllocator. The recorded traces
show the lifetimes docs/torch.md describes (at most two units of weights and of gradient buckets
held at once), every planner runs the steps after the learned one from its arena with no
fallback, and the losses are bit-equal to MaxPool's on both ranks."""
import contextlib
import gc
import operator
import os
import pickle
import struct
from functools import reduce

import pytest
import torch

pytest.importorskip("megatron_fsdp.param_and_grad_buffer", reason="megatron_fsdp is not installed")

HIDDEN, LAYERS, STEPS = 64, 6, 2  # step 0 is learned, step 1 runs from the arenas
RUNS = ("maxpool", "max", "by_bytes", "interval")


def _stub_cuda():
    """What Megatron-FSDP calls on torch.cuda, as no-ops on one CPU stream (a spawned process only)."""

    class Event:
        def record(self, *a, **k):
            pass

        def wait(self, *a, **k):
            pass

        def query(self):
            return True

    class Stream:
        def __init__(self, *a, **k):
            pass

        def wait_stream(self, *a):
            pass

        def record_event(self, *a):
            return Event()

    torch.cuda.Stream, torch.cuda.Event = Stream, Event
    torch.cuda.current_stream = lambda *a, **k: Stream()
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.empty_cache = lambda: None
    torch.cuda.current_device = lambda: 0
    torch.Tensor.cuda = lambda self, *a, **k: self
    import megatron_fsdp.utils as mu

    def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):  # MaxPool's buffers, on CPU
        n = reduce(operator.mul, tensor_shape, 1)
        if self.buffer.get((name, dtype)) is None or self.buffer[(name, dtype)].numel() < n:
            self.buffer[(name, dtype)] = torch.empty(n, dtype=dtype)
        return self.buffer[(name, dtype)][0:n].view(*tensor_shape)

    mu.GlobalMemoryBuffer.get_tensor = get_tensor


class Heavy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(HIDDEN, 4 * HIDDEN), torch.nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Light(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj, self.back = torch.nn.Linear(HIDDEN, HIDDEN // 4), torch.nn.Linear(HIDDEN // 4, HIDDEN)

    def forward(self, x):
        return x + self.back(self.proj(x))


def _train(run, rank):
    import megatron_fsdp.utils as mu
    from megatron_fsdp import MixedPrecisionPolicy, fully_shard_model, fully_shard_optimizer
    from torch.distributed.device_mesh import init_device_mesh

    from headroom.torch import megatron_fsdp as hm

    mu._GLOBAL_MEMORY_BUFFER = None
    before = set(hm.allocators())  # an earlier run's allocators live on with Megatron's hooks
    if run != "maxpool":
        hm.install(run)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Heavy() if i % 3 == 0 else Light() for i in range(LAYERS)])
    mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("fsdp", "tp"))
    fsdp = fully_shard_model(
        model, device_mesh=mesh, dp_shard_dim="fsdp", tp_dim="tp", fsdp_unit_modules=[Heavy, Light],
        zero_dp_strategy=3, device=torch.device("cpu"), fsdp_double_buffer=True, maxpool_double_buffer=True,
        mixed_precision_policy=MixedPrecisionPolicy(main_params_dtype=torch.float32, main_grads_dtype=torch.float32,
                                                    grad_comm_dtype=torch.bfloat16))
    opt = fully_shard_optimizer(torch.optim.Adam(fsdp.parameters(), lr=1e-3))
    losses = []
    for step in range(STEPS):
        x = torch.randn(8, HIDDEN, generator=torch.Generator().manual_seed(10 * step + rank))
        loss = fsdp(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(struct.pack("<f", loss.item()).hex())
        if run != "maxpool":
            hm.end_step()
    out = {"losses": losses}
    if run == "maxpool":
        out["buffers"] = {k[0]: v.numel() * v.element_size() for k, v in mu.get_global_memory_buffer().buffer.items()}
    else:
        out["pools"] = [dict(a.report(), trace=a.trace.to_text(), units=len(a.fsdp_unit_buckets),
                             nbytes={b: sum(p.numel() for p in g.params) for b, g in enumerate(a.fsdp_param_groups)})
                        for a in hm.allocators() if a not in before and a.report()["acquires"]]
        for p in out["pools"]:
            p.pop("stats")
        hm.uninstall()
    del fsdp, opt, model
    gc.collect()
    return out


def _worker(rank, init_file, out_dir, log_file):
    import logging

    import torch.distributed as dist

    _stub_cuda()
    logging.basicConfig(filename=f"{log_file}.{rank}", level=logging.WARNING)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        results = {run: _train(run, rank) for run in RUNS}
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(results, f)


def test_megatron_fsdp_runs_on_headroom_arenas(tmp_path):
    import spawned

    from headroom import pool as hp

    spawned.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path), str(tmp_path / "log")), nprocs=2)
    for rank in range(2):
        res = pickle.loads((tmp_path / f"rank{rank}.pkl").read_bytes())
        maxpool = sum(v for k, v in res["maxpool"]["buffers"].items() if k.startswith("fsdp_"))
        for run in RUNS[1:]:
            assert res[run]["losses"] == res["maxpool"]["losses"], (rank, run)
            pools = {p["name"]: p for p in res[run]["pools"]}
            assert set(pools) == {"fsdp_params", "fsdp_grads"}  # the FP8 transpose allocator served nothing
            for p in pools.values():
                assert p["planned"] and sum(p["fallbacks"].values()) == 0, (run, p)
                assert p["bound"] <= p["arena_bytes"] <= p["megatron_max_bytes"]
                assert hp.LeaseTrace.parse(p["trace"]).to_text() == p["trace"]
                # one acquire per lease: each kept step's forward and backward (weights) or backward
                # (gradients); Megatron's initialisation (no strict assignment) is not recorded. The
                # trace keeps each distinct step once: the weights' learned step (it fetches unit 1
                # before it frees unit 0) and the later ones (all alike), the gradients' one step
                steps = p["trace"].split("\nstep\n")[:-1]
                assert len(steps) == (2 if p["name"] == "fsdp_params" else 1), (run, p["trace"])
                for text in steps:
                    assert sum(line.startswith("acquire") for line in text.splitlines()) == p["units"] * (2 if p["name"] == "fsdp_params" else 1)
                requests = [int(line.split()[2]) for line in p["trace"].splitlines() if line.startswith("acquire")]
                # the real lifetimes: never more than two units held, a heavy one and a light one
                heavy, light = sorted(set(requests))[-1], sorted(set(requests))[-2]
                assert p["bound"] == -(-heavy // 256) * 256 + -(-light // 256) * 256
            # max holds what Megatron's MaxPool holds, each slot rounded up to the alignment
            mx = sum(p["arena_bytes"] for p in pools.values())
            if run == "max":
                assert 0 <= mx - maxpool < 256 * len(res["maxpool"]["buffers"])
        log = (tmp_path / f"log.{rank}").read_text()
        assert "optimizer steps ran without" not in log and "fsdp_double_buffer" not in log
