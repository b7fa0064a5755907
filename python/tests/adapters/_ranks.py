# SPDX-License-Identifier: Apache-2.0
"""Start one process per rank of a gloo world on this machine and wait for all of them: the
harness of the adapters' multi-process tests (test_torch_pipelining*.py)."""
import os
import signal
import socket
import subprocess
import sys


def run_ranks(worker: str, world: int, *args: str, timeout: float = 300) -> None:
    """Runs ``python worker RANK PORT *args`` for every rank (one thread each) and fails the
    test with the rank's output unless every one exits 0. A world still running after `timeout`
    seconds (HEADROOM_RANKS_TIMEOUT overrides it) is a hang: every rank gets SIGABRT, which its
    faulthandler answers with every thread's Python stack, and the test fails with those."""
    timeout = float(os.environ.get("HEADROOM_RANKS_TIMEOUT", timeout))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-X", "faulthandler", worker, str(r), port, *args], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    logs = [""] * world
    hung = False
    try:
        for r, proc in enumerate(procs):
            try:
                logs[r] = proc.communicate(timeout=timeout)[0]
            except subprocess.TimeoutExpired:
                hung = True
                break
        if hung:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGABRT)
            for r, proc in enumerate(procs):
                try:
                    logs[r] = proc.communicate(timeout=20)[0]
                except subprocess.TimeoutExpired:
                    logs[r] = "(no output: the rank did not end 20 s after SIGABRT)"
    finally:
        for proc in procs:
            proc.kill()
    assert not hung, f"{worker}: ranks still running after {timeout:g} s; their stacks:\n" + "\n".join(
        f"--- rank {r} (exit {proc.returncode}):\n{logs[r][-3000:]}" for r, proc in enumerate(procs))
    for r, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {r} exited {proc.returncode}:\n{logs[r][-4000:]}"


V_SHAPES = ("zbv", "dualpipe_v")  # placements with two adjacent stages on one rank


def gloo_runs_local_stage_edges() -> bool:
    """Whether this torch's pipelining runtime runs, over gloo, a placement with two adjacent
    stages on one rank (the V shapes). torch 2.11's runtime opens each stage's neighbours with a
    send to the next stage's rank (``_PipelineStageBase._get_init_p2p_neighbors_ops``), which for
    a V's middle edge is the sender itself, and gloo has no pair to itself ("Pair is not
    connected"): that rank's step raises while its peers wait in theirs. NCCL runs it (the GPU
    bench, bench/pipeline_torch_llama.py); torch 2.15's runtime sends no such message."""
    from torch.distributed.pipelining import stage

    return not hasattr(stage._PipelineStageBase, "_get_init_p2p_neighbors_ops")
