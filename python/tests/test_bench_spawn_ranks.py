# SPDX-License-Identifier: Apache-2.0
"""bench/spawn_ranks.py on the CPU: the pipeline benches' ranks, told apart by how they ended: a
rank that answered, one that raised (the bench skips: a peer that cannot run), one killed by a
signal and one that never answered (the bench fails: before, a rank that died was reported as
a skip and the run passed)."""
import faulthandler
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from spawn_ranks import gather  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork context")
CTX = multiprocessing.get_context("fork")


def worker(rank, world, how, port, results):
    what = how[rank]
    if what == "ok":
        results.put(("ok", rank, port))
    elif what == "raise":
        results.put(("error", rank, "TypeError: an API that changed"))
    elif what == "segv":
        faulthandler.disable()  # pytest's handler would print this planted crash's stack
        os.kill(os.getpid(), signal.SIGSEGV)
    elif what == "wait":
        time.sleep(60)  # a peer waiting in NCCL for a rank that is gone


def test_every_rank_answers():
    got, errors, died, missing = gather(CTX, worker, 2, ["ok", "ok"], 1234, 30)
    assert sorted(got) == [0, 1] and got[1] == ("ok", 1, 1234)
    assert (errors, died, missing) == ([], [], [])


def test_a_rank_that_raises_is_an_error_and_its_waiting_peer_is_not_counted_as_died():
    t0 = time.monotonic()
    got, errors, died, missing = gather(CTX, worker, 2, ["raise", "wait"], 0, 30, grace_s=0.5)
    assert errors == ["rank 0: TypeError: an API that changed"]
    assert died == [] and missing == [0, 1] and got == {}
    assert time.monotonic() - t0 < 10  # the peer is killed, not waited for


def test_a_rank_killed_by_a_signal_is_reported_at_once():
    t0 = time.monotonic()
    got, errors, died, missing = gather(CTX, worker, 2, ["wait", "segv"], 0, 60, grace_s=0.5)
    assert died == [f"rank 1 terminated with signal {int(signal.SIGSEGV)}"]
    assert errors == [] and missing == [0, 1]
    assert time.monotonic() - t0 < 30  # not at the deadline


def test_a_rank_that_never_answers_is_missing_at_the_deadline():
    got, errors, died, missing = gather(CTX, worker, 2, ["ok", "wait"], 0, 2, grace_s=0.5)
    assert sorted(got) == [0] and missing == [1] and died == [] and errors == []
