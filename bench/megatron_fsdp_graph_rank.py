# SPDX-License-Identifier: Apache-2.0
"""bench/megatron_fsdp_graph_nemotronh.py's per-rank harness: one (variant, allocator) run.

The variants (``VARIANTS``: block pattern, experts implementation, dtype) and ``build_model``
(transformers' NemotronH from bench/megatron_fsdp_pool_nemotronh.py's ``model_config``, seeded),
the attention backend (``attention_context``), the pattern check, the mask pin that keeps eager
and captured steps on one attention path (``pin_single_sequence_masks``), and what one process
per rank does: ``fully_shard_model`` with ``cuda_graph_mode=True``, the eager warm-up and
reference steps, strategy (a) (the whole forward+backward under ``torch.cuda.graph``, its replays
compared bit for bit with eager, the arena addresses and capture leases checked) and strategy (b)
(``torch.cuda.make_graphed_callables`` over the FSDP units) -- steps 1-5 of the protocol in the
entry point's docstring. Each rank writes its verdict to ``<--result>.rank<r>`` (JSON) and leaves
with ``os._exit(0)``; exceptions are reported by ``first_line``, ``where`` and ``root_cause``.

Not a program: bench/megatron_fsdp_graph_nemotronh.py runs ``child`` (``--child``, one process
pair per run) and turns the rank files into its PASS / FAIL lines; its ``--predict`` builds the
variants here on the meta device.
"""
import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from megatron_fsdp_pool import init_rank  # noqa: E402 - the sibling benches' helpers
from megatron_fsdp_pool_nemotronh import CONFIGS, MAXPOOL, PATTERN, model_config, unit_classes  # noqa: E402

VARIANTS = {
    "dense": dict(pattern="M*M*M*M*", experts_implementation=None, dtype="float32"),
    "hybrid-eager": dict(pattern=PATTERN, experts_implementation="eager", dtype="float32"),
    "hybrid-grouped_mm": dict(pattern=PATTERN, experts_implementation="grouped_mm", dtype="bfloat16"),
}
ATTENTION = ("sdpa-math", "sdpa", "eager")
SIZE = CONFIGS["h1024"]  # hidden 1024, 8 experts (the pool bench's h1024 row); seq and batch: --seq, --batch


def build_model(variant: str, seq: int, device, hidden: int = SIZE["hidden"], experts: int = SIZE["experts"],
                attention: str = "sdpa-math", kv_heads: int | None = None):
    """NemotronHForCausalLM of `variant` on `device` (its dtype), seeded: the same weights in every
    run, with transformers' attention implementation for `attention` (one of ATTENTION: "sdpa" for
    both sdpa ones, attention_context() picks the backend) and `kv_heads` key/value heads (None: the
    config's 2, grouped-query attention). Returns (model, experts implementation transformers chose)."""
    import torch
    from transformers import NemotronHForCausalLM

    v = VARIANTS[variant]
    cfg = model_config(hidden, experts, seq, pattern=v["pattern"])
    if kv_heads is not None:
        cfg.num_key_value_heads = kv_heads
    if v["experts_implementation"] is not None:
        cfg._experts_implementation = v["experts_implementation"]
    cfg._attn_implementation = "eager" if attention == "eager" else "sdpa"
    torch.manual_seed(1234)
    with torch.device(device):
        model = NemotronHForCausalLM(cfg)
    model = model.to(getattr(torch, v["dtype"]))
    return model, getattr(model.config, "_experts_implementation", "n/a (this transformers has no experts_implementation)")


def attention_context(attention: str):
    """What a forward runs under: torch's math backend for "sdpa-math", nothing otherwise."""
    if attention != "sdpa-math":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


def check_pattern(model, pattern: str) -> None:
    """The built model has one NemotronHBlock per pattern symbol, of the symbol's kind."""
    kinds = {"M": "mamba", "*": "attention", "E": "moe", "-": "mlp"}
    blocks = [m for m in model.modules() if isinstance(m, tuple(unit_classes()))]
    got = [type(b.mixer).__name__.lower() for b in blocks]
    want = [kinds[c] for c in pattern]
    if len(got) != len(want) or any(w not in g for g, w in zip(got, want)):
        raise RuntimeError(f"pattern {pattern!r}: the model has blocks {got}; expected {want}")


def pin_single_sequence_masks() -> None:
    """transformers' mask code takes other paths while a CUDA stream captures than in eager mode
    (it counts capture as tracing, where it may not read the host), so an eager step and its
    replay would run different attention. Two places, both pinned to eager's answer for the
    bench's rows (single sequences, no padding mask, so no host read is needed):

    - the packed-sequence check (``masking_utils.find_packed_sequence_indices``: ``(...).all()``
      on the host in eager mode): None (no packing) in both modes;
    - whether SDPA may drop the causal mask (``masking_utils._ignore_causal_mask_sdpa``): under
      capture transformers 5.17 keeps it, materialising a (batch, 1, seq, seq) bool mask, and with a
      mask its sdpa attention repeats the key/value heads itself (``repeat_kv``) instead of passing
      ``enable_gqa=True``; eager drops it (``is_causal=True``, SDPA's grouped-query path). 1x H200,
      torch 2.11, 2026-11-29: the two paths' dK and dV differ in the last bits (the group sum is
      made by different kernels), which was what kept the bf16 hybrid's replayed gradients from
      equalling eager's. With no padding mask the answer is computed as in eager."""
    import torch
    import transformers.masking_utils as mu

    if hasattr(mu, "find_packed_sequence_indices"):
        mu.find_packed_sequence_indices = lambda position_ids: None
    if hasattr(mu, "_ignore_causal_mask_sdpa") and hasattr(mu, "is_tracing"):
        decide = mu._ignore_causal_mask_sdpa

        def as_in_eager(padding_mask, *args, **kwargs):
            capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
            if padding_mask is not None or not capturing:
                return decide(padding_mask, *args, **kwargs)
            tracing = mu.is_tracing
            mu.is_tracing = lambda *a, **k: False  # nothing to read on the host without a padding mask
            try:
                return decide(padding_mask, *args, **kwargs)
            finally:
                mu.is_tracing = tracing

        mu._ignore_causal_mask_sdpa = as_in_eager


def where(e: BaseException) -> str:
    """Where `e` was raised: the innermost frame of its traceback, and the innermost one outside
    torch when that is another (file:line in function)."""
    frames = traceback.extract_tb(e.__traceback__)
    if not frames:
        return "?"
    name = lambda f: f"{Path(f.filename).name}:{f.lineno} in {f.name}"  # noqa: E731
    outside = [f for f in frames if "/torch/" not in f.filename]
    if not outside or outside[-1] is frames[-1]:
        return name(frames[-1])
    return f"{name(frames[-1])}, called from {name(outside[-1])}"


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def root_cause(e: BaseException) -> BaseException:
    """The exception that started it: torch.cuda.graph's exit ends the capture and raises its own
    error (the capture was invalidated) with the body's exception as its context."""
    seen = set()
    while e.__context__ is not None and id(e) not in seen and not e.__suppress_context__:
        seen.add(id(e))
        e = e.__context__
    return e


# ---------------------------------------------------------------------------------------------
# one run: one process per rank


def arena_state(hm, mutils) -> list:
    """Where the double buffers live: every headroom arena (address, bytes, plan fingerprint,
    fallbacks) or every Megatron fsdp_* global buffer (address, bytes)."""
    if hm is not None:
        return [[a.name, a.arena.data_ptr() if a.arena is not None else None,
                 a.arena.numel() if a.arena is not None else 0,
                 a.plan.fingerprint if a.plan is not None else None,
                 sum(a.report()["fallbacks"].values())] for a in hm.allocators()]
    return sorted([k[0], v.data_ptr(), v.numel() * v.element_size()]
                  for k, v in mutils.get_global_memory_buffer().buffer.items() if k[0].startswith("fsdp_"))


def main_grads(fsdp) -> list:
    """(name, this rank's shard) of every parameter's main gradient, as the optimizer sees it
    (``param.grad``, a view of Megatron's main-gradient buffer, attached by finish_grad_sync).
    Not the whole buffer: its alignment padding is no parameter's and holds whatever the
    communication bucket's padding held."""
    out = []
    for name, p in fsdp.param_and_grad_buffer.optimizer_named_parameters:
        g = p.grad
        out.append((name, None if g is None else getattr(g, "_local_tensor", g)))
    return out


def compare(fsdp, loss, ref) -> dict:
    """torch.equal of the loss and of every parameter's main-gradient shard against the reference."""
    import torch

    bad = [n for (n, t), (_, r) in zip(main_grads(fsdp), ref["grads"])
           if (t is None) != (r is None) or (t is not None and not torch.equal(t, r))]
    return {"loss_equal": bool(torch.equal(loss, ref["loss"])), "grads_equal": not bad,
            "grads": sum(r is not None for _, r in ref["grads"]), "first_bad_grad": bad[0] if bad else None}


def one_gather_at_a_time() -> None:
    """--dry-run: Megatron-FSDP's coalesced parameter all-gathers run to completion before the call
    returns (``_coalescing_manager(..., async_ops=False)``) instead of staying in flight on gloo's
    worker threads. On the CPU (torch 2.15.0, gloo, 2 ranks) runs with them in flight ended in heap
    corruption inside gloo's threads (SIGSEGV in malloc on ``pt_gloo_runloop``; abort in
    malloc under ``AsyncAllgatherCoalescedWork``): 1 of 4 hybrid-eager runs of 21 steps, 2026-11-29;
    synchronous, 18 of 18 were clean. The dry run checks the bench's bookkeeping, not the overlap,
    so it gives the overlap up."""
    import megatron_fsdp.param_and_grad_buffer as pgb

    coalesce = pgb._coalescing_manager

    @contextlib.contextmanager
    def synchronous(group=None, device=None, async_ops=False):
        with coalesce(group, device, async_ops=False) as cm:
            yield cm

    pgb._coalescing_manager = synchronous


def expand_gqa_heads() -> None:
    """--gqa expand: torch's ``scaled_dot_product_attention`` called with ``enable_gqa=True`` (what
    transformers' sdpa attention passes for grouped-query heads with no mask) gets its key and
    value heads repeated to the query heads first (``repeat_interleave``) and ``enable_gqa=False``:
    the same attention, as transformers runs it where it keeps a mask. Before the masks were pinned
    (``pin_single_sequence_masks``) this made eager and capture agree; it is kept to compare."""
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention

    def repeated_heads(query, key, value, *args, **kwargs):
        if kwargs.get("enable_gqa") and key.shape[-3] != query.shape[-3]:
            group = query.shape[-3] // key.shape[-3]
            key, value = key.repeat_interleave(group, dim=-3), value.repeat_interleave(group, dim=-3)
            kwargs["enable_gqa"] = False
        return sdpa(query, key, value, *args, **kwargs)

    F.scaled_dot_product_attention = repeated_heads


def run_rank(rank, args, out_path):
    import torch
    import torch.distributed as dist

    res = {"rank": rank, "variant": args.variant, "allocator": args.allocator, "error": None, "strategies": {}}
    if args.gqa == "expand":
        expand_gqa_heads()
    if args.dry_run:
        import datetime

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests" / "adapters"))
        from test_megatron_fsdp_run import _stub_cuda  # torch.cuda's stream/event/device calls as CPU no-ops

        _stub_cuda()
        one_gather_at_a_time()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                                world_size=args.world_size,
                                timeout=datetime.timedelta(seconds=args.collective_timeout))
        device = torch.device("cpu")
    else:
        device = init_rank(rank, args)
    res["stream"] = args.stream
    try:
        if args.stream == "side" and not args.dry_run:
            with torch.cuda.stream(torch.cuda.Stream()):
                body(rank, args, device, res)
        else:
            body(rank, args, device, res)
    except Exception as e:  # noqa: BLE001 - reported by the parent
        res["error"] = f"{first_line(e)} at {where(e)}\n{traceback.format_exc()[-3000:]}"
    Path(f"{out_path}.rank{rank}").write_text(json.dumps(res, default=str))
    # every rank's work is done (or an invalidated capture left NCCL mid-step): leave without the
    # teardown collectives, and without tearing down a registered pool under a live graph
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def body(rank, args, device, res) -> None:
    """Steps 1-5 of the protocol on one rank, into `res`. After a failed capture the process
    group and Megatron's state may be mid-step: nothing collective runs after it."""
    import torch
    import torch.distributed as dist
    from megatron_fsdp import MixedPrecisionPolicy, fully_shard_model
    from megatron_fsdp import utils as mutils
    from torch.distributed.device_mesh import init_device_mesh

    pin_single_sequence_masks()
    hm = None
    if args.allocator != MAXPOOL:
        from headroom.torch import megatron_fsdp as hm

        hm.install(planner=args.allocator.partition("@")[0])
    nccl_pool = None
    if args.allocator.endswith("@nccl"):
        # the arena in a MemPool on ProcessGroupNCCL's allocator (ncclMemAlloc), registered with the
        # group once it is laid: NCCL registration and the graph on the same memory
        nccl_pool = torch.cuda.MemPool(dist.group.WORLD._get_backend(device).mem_allocator)
    mesh = init_device_mesh(device.type, (args.world_size, 1), mesh_dim_names=("fsdp", "tp"))
    model, impl = build_model(args.variant, args.seq, device, args.hidden, args.experts, args.attention,
                              args.kv_heads)
    try:  # --predict and --dry-run check it; here a renamed mixer class must not cost the run
        check_pattern(model, VARIANTS[args.variant]["pattern"])
        res["pattern_check"] = "ok"
    except RuntimeError as e:
        res["pattern_check"] = str(e)
    res["experts_implementation"] = impl
    fsdp = fully_shard_model(
        model, device_mesh=mesh, dp_shard_dim="fsdp", tp_dim="tp", expt_device_mesh=mesh,
        fsdp_unit_modules=unit_classes(), zero_dp_strategy=3, device=device,
        fsdp_double_buffer=True, maxpool_double_buffer=True, cuda_graph_mode=True,
        mixed_precision_policy=MixedPrecisionPolicy(main_params_dtype=torch.float32,
                                                    main_grads_dtype=torch.float32,
                                                    grad_comm_dtype=torch.bfloat16),
    )
    g = torch.Generator().manual_seed(99 + rank)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=g).to(device)

    def step():
        with attention_context(args.attention):
            loss = fsdp(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    def timed(fn):
        """fn() and its milliseconds: CUDA events on the current stream (--dry-run: the host clock)."""
        if args.dry_run:
            t = time.perf_counter()
            out = fn()
            return out, (time.perf_counter() - t) * 1e3
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        out = fn()
        t1.record()
        torch.cuda.synchronize()
        return out, t0.elapsed_time(t1)

    # 1. warm-up: headroom's learning step, then steps on the arena
    for _ in range(args.warmup):
        fsdp.zero_grad_buffer()
        step()
        if hm is not None:
            with torch.cuda.use_mem_pool(nccl_pool) if nccl_pool is not None else contextlib.nullcontext():
                hm.end_step()
            if nccl_pool is not None and "nccl_pool" not in res:
                dist.group.WORLD._get_backend(device).register_mem_pool(nccl_pool)
                res["nccl_pool"] = {"segments": len(nccl_pool.snapshot()),
                                    "arenas_inside": [any(seg["address"] <= a.arena.data_ptr() < seg["address"] + seg["total_size"]
                                                          for seg in nccl_pool.snapshot())
                                                      for a in hm.allocators() if a.arena is not None]}
    torch.cuda.synchronize()
    if hm is not None:
        res["arenas"] = [{k: r[k] for k in ("name", "planner", "arena_bytes", "bound", "winner", "fallbacks")}
                         for r in hm.report() if r["acquires"]]

    # 2. eager steps, timed; the last one is the reference (its leases recorded)
    leases = {"eager": [], "capture": []}
    phase = ["eager"]

    def listen(ev):
        if ev["action"] == "alloc" and phase[0] in leases:
            leases[phase[0]].append([ev["allocator"], ev["bucket"], ev["addr"], ev["size"]])

    if hm is not None:
        hm.add_lease_listener(listen)
    eager_ms, ref = [], None
    for i in range(args.iters):
        leases["eager"].clear()
        fsdp.zero_grad_buffer()
        loss, ms = timed(step)
        eager_ms.append(ms)
        if ref is not None:  # eager against eager: a replay can only be held to what eager repeats
            c = compare(fsdp, loss.detach(), ref)
            res["eager_repeats"] = res.get("eager_repeats", True) and c["loss_equal"] and c["grads_equal"]
            res.setdefault("eager_repeat_checks", []).append(c)
        ref = {"loss": loss.detach().clone(),
               "grads": [(n, None if t is None else t.clone()) for n, t in main_grads(fsdp)]}
    res["eager_ms"] = eager_ms
    res["loss"] = ref["loss"].item()
    before = arena_state(hm, mutils)

    # (b)'s sample inputs, made before any capture (a failed capture may leave the allocator unusable)
    sample = tuple((torch.zeros(args.batch, args.seq, model.config.hidden_size, device=device,
                                dtype=next(model.parameters()).dtype, requires_grad=True),)
                   for _ in range(len(VARIANTS[args.variant]["pattern"])))

    # 3. strategy (a): the whole forward+backward in one graph
    a = res["strategies"]["a"] = {"what": "whole forward+backward under torch.cuda.graph "
                                          f"(capture_error_mode={args.capture_error_mode})"}
    phase[0] = "capture"
    fsdp.zero_grad_buffer()
    dist.barrier()
    torch.cuda.synchronize()
    try:
        if args.dry_run:  # no graph on the CPU: the "capture" is an eager step, a "replay" another one
            static_loss, replay = step(), step
        else:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=torch.cuda.Stream(), capture_error_mode=args.capture_error_mode):
                static_loss = step()

            def replay():
                graph.replay()
                return static_loss
    except Exception as e:  # noqa: BLE001 - the strategy's verdict
        cause = root_cause(e)
        a.update(status="FAIL", error=first_line(cause), where=where(cause), raised_as=first_line(e),
                 trace="".join(traceback.format_exception(cause))[-6000:])
        phase[0] = "done"
        try_graphed_units(fsdp, sample, res)
        return
    phase[0] = "done"
    torch.cuda.synchronize()
    dist.barrier()
    after_capture = arena_state(hm, mutils)
    replay_ms, checks = [], []
    for _ in range(args.replays):
        fsdp.zero_grad_buffer()
        out, ms = timed(replay)
        replay_ms.append(ms)
        checks.append(compare(fsdp, out.detach(), ref))
    after_replay = arena_state(hm, mutils)
    fsdp.zero_grad_buffer()
    eager_after = compare(fsdp, step().detach(), ref)
    torch.cuda.synchronize()
    a.update(
        status="PASS", replays=len(checks),
        loss_equal=all(c["loss_equal"] for c in checks), grads_equal=all(c["grads_equal"] for c in checks),
        grads=checks[0]["grads"] if checks else 0, dry_run=args.dry_run,
        first_bad=next((c for c in checks if not (c["loss_equal"] and c["grads_equal"])), None),
        eager_after_replay_equal=eager_after["loss_equal"] and eager_after["grads_equal"],
        addresses_fixed=before == after_capture == after_replay, arena_state=before,
        capture_leases_at_eager_addresses=(leases["capture"] == leases["eager"]) if hm is not None else None,
        leases=len(leases["capture"]), replay_ms=replay_ms,
        eager_median_ms=statistics.median(eager_ms), replay_median_ms=statistics.median(replay_ms))
    if args.dry_run:
        try_graphed_units(fsdp, sample, res)


def try_graphed_units(fsdp, sample, res) -> None:
    """Strategy (b): torch.cuda.make_graphed_callables over the FSDP units (NemotronHBlocks), one
    sample input (batch, seq, hidden) each."""
    import torch

    units = [m for m in fsdp.module.modules() if isinstance(m, tuple(unit_classes()))]
    b = res["strategies"]["b"] = {"what": f"torch.cuda.make_graphed_callables over the {len(units)} FSDP units",
                                  "hooks_on_first_unit": {
                                      "forward_pre": len(units[0]._forward_pre_hooks),
                                      "forward": len(units[0]._forward_hooks)} if units else None}
    try:
        torch.cuda.make_graphed_callables(tuple(units), sample[:len(units)])
        b.update(status="UNCHECKED", error="make_graphed_callables returned; this bench does not replay it",
                 where="-")
    except Exception as e:  # noqa: BLE001 - the strategy's verdict
        cause = root_cause(e)
        b.update(status="FAIL", error=first_line(cause), where=where(cause),
                 trace="".join(traceback.format_exception(cause))[-6000:])


def child(args) -> None:
    import torch.multiprocessing as mp

    mp.spawn(run_rank, args=(args, args.result), nprocs=args.world_size, join=True)
