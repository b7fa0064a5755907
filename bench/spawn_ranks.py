# SPDX-License-Identifier: Apache-2.0
"""The ranks of a bench that spawns one process per GPU and reads their verdicts from a queue
(bench/pipeline_retention_torch.py, bench/pipeline_torch_llama.py): start them, gather what each
puts on the queue, and tell how each ended.

Each rank puts one tuple on `results`: ("ok", rank, ...) with its rows, ("skip", rank, text)
when the peer it measures cannot run here (an API that changed: the bench skips), or
("error", rank, text) for anything else (the run fails)."""
import queue
import signal
import socket
import time
from typing import NamedTuple


class Ranks(NamedTuple):
    got: dict  # rank -> its ("ok", rank, ...) tuple
    errors: list  # "rank r: text", in arrival order
    skipped: list  # "rank r: text"
    died: list  # "rank r terminated with signal SIGxxx": before the gathering stopped
    missing: list  # ranks with no "ok"


def signal_name(exitcode: int) -> str:
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gather(ctx, worker, world, args, port, deadline_s, grace_s=5.0) -> Ranks:
    """Runs worker(rank, world, args, port, results) in `world` processes of `ctx`; port 0 is a
    free TCP port of this host (a bench's `--port 0`). Stops at the
    first "error" or "skip" (its peers may wait in NCCL for the rank that raised), at the first
    rank that ended without an answer (a signal, or an exit), or after deadline_s; ranks still
    alive grace_s later are killed. `died` is the ranks killed by a signal when the gathering
    stopped, or during the grace when every rank had answered (a crash in teardown); a rank that
    dies in the grace after another's error (NCCL's watchdog aborting a rank whose peer is gone)
    is the error's consequence, not counted."""
    port = port or free_port()
    results = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, args, port, results), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    got, errors, skipped = {}, [], []
    deadline = time.monotonic() + deadline_s
    quiet = 0  # polls in a row with a rank gone unanswered and nothing on the queue
    while len(got) + len(errors) + len(skipped) < world and time.monotonic() < deadline:
        try:
            item = results.get(timeout=1.0)
        except queue.Empty:
            gone = [r for r, p in enumerate(procs) if p.exitcode is not None and r not in got]
            quiet = quiet + 1 if gone else 0
            if quiet >= 2:  # its answer would have arrived: it ended without one
                break
            continue
        quiet = 0
        kind, rank = item[0], item[1]
        if kind == "ok":
            got[rank] = item
        else:
            (skipped if kind == "skip" else errors).append(f"rank {rank}: {item[2]}")
            break

    def dead():
        return {r for r, p in enumerate(procs) if p.exitcode is not None and p.exitcode < 0}

    dead_at_stop = dead()
    grace_end = time.monotonic() + grace_s
    for p in procs:
        p.join(timeout=max(0.0, grace_end - time.monotonic()))
    killed = set()
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
            killed.add(r)
    counted = dead_at_stop if (errors or skipped) else dead() - killed
    died = [f"rank {r} terminated with signal {signal_name(procs[r].exitcode)}" for r in sorted(counted)]
    return Ranks(got, errors, skipped, died, sorted(set(range(world)) - set(got)))
