# SPDX-License-Identifier: Apache-2.0
"""The ranks of a bench that spawns one process per GPU and reads their verdicts from a queue
(bench/pipeline_retention_torch.py, bench/pipeline_torch_llama.py): start them, gather what each
puts on the queue, and tell a rank that raised from one that died or never answered.

Each rank puts one tuple on `results`: ("ok", rank, ...) or ("error", rank, text)."""
import queue
import time


def gather(ctx, worker, world, args, port, deadline_s, grace_s=5.0):
    """Runs worker(rank, world, args, port, results) in `world` processes of `ctx`. Returns
    (got: {rank: tuple}, errors: ["rank r: text"], died: ["rank r terminated with signal N"],
    missing: ranks with no answer). Stops at the first error (its peers may wait in NCCL for the
    rank that raised), at the first rank killed by a signal, or after deadline_s; ranks still
    alive grace_s later are killed, and are not counted as died."""
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, args, port, results), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    got, errors = {}, []
    deadline = time.monotonic() + deadline_s
    while len(got) + len(errors) < world and time.monotonic() < deadline:
        try:
            item = results.get(timeout=1.0)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and results.empty():
                break
            if any(p.exitcode is not None and p.exitcode < 0 for p in procs):
                break  # a rank died: its peers wait in NCCL for it
            continue
        if item[0] == "ok":
            got[item[1]] = item
        else:
            errors.append(f"rank {item[1]}: {item[2]}")
            break
    killed = set()
    for r, p in enumerate(procs):
        p.join(timeout=grace_s)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
            killed.add(r)
    died = [f"rank {r} terminated with signal {-p.exitcode}" for r, p in enumerate(procs)
            if r not in killed and p.exitcode is not None and p.exitcode < 0]
    missing = sorted(set(range(world)) - set(got))
    return got, errors, died, missing
