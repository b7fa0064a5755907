#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
# headroom: stress lanes (tools/gpu-stress --lanes: a file rendezvous of its own per run, bandwidth-bound)
"""tools/gpu-stress's control: bench/cp_torch_gather_nccl.py's process layout and collectives
with torch only (headroom is never imported). Two processes (mp.spawn, cuda:0 and cuda:1, NCCL
with device_id, a file store), each: all_gather_into_tensor of a [T/2, w] shard, a reorder by
index_select (what headroom's kernel does), backward through reduce_scatter_tensor, a barrier,
destroy_process_group, exit. If this crashes as often as the bench under tools/gpu-stress, the
crash is in torch / NCCL / the driver, not in headroom. Prints "control: pass" (exit 0), or
"skipped: ..." (exit 77) without 2 GPUs.
"""
import datetime
import os
import sys
import tempfile

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def worker(rank, world, store):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120), device_id=device)
    try:
        gen = torch.Generator().manual_seed(0)
        for dtype in (torch.bfloat16, torch.float32):
            for _ in range(3):
                T, w = 8192, 1024
                x = torch.randn(T, w, generator=gen).to(dtype).to(device)
                perm = torch.randperm(T, generator=gen).to(device)
                local = x[perm[rank * T // world:(rank + 1) * T // world]].clone().requires_grad_()

                class Gather(torch.autograd.Function):
                    @staticmethod
                    def forward(ctx, t):
                        out = t.new_empty((T, w))
                        dist.all_gather_into_tensor(out, t)
                        return out.index_select(0, torch.argsort(perm))

                    @staticmethod
                    def backward(ctx, g):
                        dx = g.new_empty((T // world, w))
                        dist.reduce_scatter_tensor(dx, g.index_select(0, perm).contiguous())
                        return dx

                full = Gather.apply(local)
                assert torch.equal(full, x), "control: gathered rows differ"
                full.float().sum().backward()
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    import torch
    import torch.multiprocessing as mp

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        print("skipped: needs 2 GPUs")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="gpu-stress-control.") as tmp:
        mp.spawn(worker, args=(2, os.path.join(tmp, "store")), nprocs=2, join=True)
    print("control: pass")
