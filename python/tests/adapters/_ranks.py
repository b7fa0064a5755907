# SPDX-License-Identifier: Apache-2.0
"""Start one process per rank of a gloo world on this machine and wait for all of them: the
harness of the adapters' multi-process tests (test_torch_pipelining*.py)."""
import os
import socket
import subprocess
import sys


def run_ranks(worker: str, world: int, *args: str, timeout: float = 300) -> None:
    """Runs ``python worker RANK PORT *args`` for every rank (one thread each) and fails the
    test with the rank's output unless every one exits 0."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, worker, str(r), port, *args], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=timeout)[0])
    finally:
        for proc in procs:
            proc.kill()
    for r, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {r} exited {proc.returncode}:\n{logs[r][-4000:]}"
