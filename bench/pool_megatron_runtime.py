#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""MaxPool as planned against what Megatron-FSDP holds at run time, on headroom's model presets.

Megatron-FSDP plans MaxPool as `max_dtype_bucket_sizes` x buffers, but its `MaxPoolAllocator`
allocates one buffer per (buffer group, dtype, offset) lazily, as large as the largest request
made of it. This drives Megatron's own `MaxPoolAllocator` (megatron-fsdp, as installed) through one
training step of each preset (units forward then backward, 2 resident, each unit all its
buckets), its buffers on the meta device (no memory), and sums the buffers it holds after the
step. Beside it: headroom's `max` plan (= MaxPool as planned) and `interval` plan (training and
evaluation orders, 2 resident), one rank's parameter pool. CPU only; prints a table, then one
JSON line. Skips (exit 0, saying why) where megatron_fsdp or torch is not importable.

    python3 bench/pool_megatron_runtime.py
"""
import json
import sys


def skip(why):
    print(f"SKIP pool_megatron_runtime: {why}")
    sys.exit(0)


def megatron_runtime_bytes(pgb, mu, torch, groups, units):
    """Bytes Megatron's MaxPoolAllocator holds after one training step over `units` (unit ->
    bucket ids, in order)."""
    allocator = pgb.MaxPoolAllocator("fsdp_params", groups, size=2)
    saved = torch.cuda.current_device
    mu._GLOBAL_MEMORY_BUFFER = None
    torch.cuda.current_device = lambda: "meta"  # GlobalMemoryBuffer.get_tensor allocates there
    try:
        held = []
        for u in list(units) + list(reversed(units)):
            if len(held) == 2:
                for b in units[held.pop(0)]:
                    allocator.free(b)
            for b in units[u]:
                g = groups[b]
                allocator.allocate(b, sum(p.numel() for p in g.params), g.params[0].dtype, torch.device("meta"))
            held.append(u)
        return sum(t.numel() * t.element_size() for t in mu.get_global_memory_buffer().buffer.values())
    finally:
        torch.cuda.current_device = saved
        mu._GLOBAL_MEMORY_BUFFER = None


def main():
    try:
        import torch
        import megatron_fsdp.param_and_grad_buffer as pgb
        import megatron_fsdp.utils as mu
        from headroom import pool
        from headroom.torch.megatron_fsdp import _unit_buckets
    except ImportError as e:
        skip(f"{e.name or e} is not importable")

    class Group:  # the fields of Megatron's ParameterGroup its allocators read
        def __init__(self, elements, dtype, unit):
            store = torch.uint8 if dtype == "float8" else dtype
            self.params = [torch.nn.Parameter(torch.empty(elements, dtype=store, device="meta"), requires_grad=False)]
            self.dtype, self.grad_dtype, self.fsdp_unit_id = dtype, torch.float32, unit

    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32, "uint8": "float8"}
    rows, seen = [], set()
    print(f"{'workload (params, one rank)':46s} {'MaxPool planned':>15s} {'Megatron run time':>17s} "
          f"{'interval':>9s} {'planned/int':>11s} {'run time/int':>12s}")
    for name in pool.models.names():
        for ep, fp8 in ((1, False), (8, False), (1, True), (8, True)):
            try:
                w = pool.model_workload(name, ep, fp8_params=fp8)
            except ValueError:
                continue  # an EP that does not divide this model's experts
            if w.name in seen:
                continue  # a model without experts: the same workload at every EP
            seen.add(w.name)
            groups = [Group(b.elements, dtypes[b.dtype], u) for u, unit in enumerate(w.units) for b in unit.buckets]
            groups += [Group(b.elements, dtypes[b.dtype], None) for b in w.non_unit]
            planned = pool.plan(w, "max", buffers=2).arena_bytes
            runtime = megatron_runtime_bytes(pgb, mu, torch, groups, _unit_buckets(groups))
            interval = pool.plan(w, "interval", orders=[pool.training_order(w), pool.evaluation_order(w)],
                                 resident=2).arena_bytes
            rows.append(dict(workload=w.name, maxpool_planned_bytes=planned, megatron_runtime_bytes=runtime,
                             interval_bytes=interval))
            print(f"{w.name:46s} {planned / 2**30:11.3f} GiB {runtime / 2**30:13.3f} GiB {interval / 2**30:5.3f} GiB "
                  f"{planned / interval:10.2f}x {runtime / interval:11.2f}x")
    print(json.dumps({"bench": "pool_megatron_runtime", "megatron_fsdp": getattr(sys.modules.get("megatron_fsdp"),
                                                                                    "__version__", None),
                      "torch": torch.__version__, "rows": rows}))


if __name__ == "__main__":
    main()
