# SPDX-License-Identifier: Apache-2.0
"""torch.multiprocessing.spawn for the tests' multi-process worlds, each rank leaving with
``os._exit`` once its function has returned (output flushed; an exception still reaches the
parent as before, through spawn's error file).

Why: with torch 2.15 from PyPI, ranks of gloo worlds were lost to SIGABRT ("terminate called
without an active exception") after their work had finished and been checked: twice in CI on
2026-11-28, in two different tests (one of them imports nothing of headroom but the stats
module). The rank's output was complete, so the abort came after its function had returned:
presumably in the interpreter's teardown with torch's threads still running (not proven; its
cause was not found). Skipping that teardown takes nothing a test checks."""
import os
import sys

import torch.multiprocessing as mp


def _then_leave(rank, fn, *args):
    fn(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(fn, args=(), nprocs=1):
    """mp.spawn(fn, args, nprocs, join=True), each rank leaving with os._exit(0) after fn."""
    mp.spawn(_then_leave, args=(fn, *args), nprocs=nprocs, join=True)
