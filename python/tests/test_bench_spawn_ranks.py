# SPDX-License-Identifier: Apache-2.0
"""bench/spawn_ranks.py on the CPU: the pipeline benches' ranks, told apart by how they ended: a
rank that answered, one that cannot run the peer (a skip), one that raised, one killed by a
signal, one that exited without an answer and one that never answered (the run fails: before,
bench/pipeline_retention_torch.py reported a rank that died as a skip, exit 0)."""
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


def die_by_sigsegv():
    # The default action, not a handler's: pytest's faulthandler would print this planted crash's
    # stack, and under ASan (the CI's sanitizer run of this suite) its handler would report it and
    # exit 1 instead of dying by the signal.
    faulthandler.disable()
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGSEGV)


def worker(rank, world, how, port, results):
    what = how[rank]
    if what == "ok":
        results.put(("ok", rank, port))
    elif what in ("skip", "error"):
        results.put((what, rank, f"{what} on rank {rank}"))
    elif what == "segv":
        die_by_sigsegv()
    elif what == "exit":
        os._exit(3)
    elif what == "wait":
        time.sleep(60)  # a peer waiting in NCCL for a rank that is gone
    elif what == "ok+segv":  # answers, then dies in teardown
        results.put(("ok", rank, port))
        results.close()
        results.join_thread()
        die_by_sigsegv()


def test_every_rank_answers():
    r = gather(CTX, worker, 2, ["ok", "ok"], 1234, 30)
    assert sorted(r.got) == [0, 1] and r.got[1] == ("ok", 1, 1234)
    assert (r.errors, r.skipped, r.died, r.missing) == ([], [], [], [])


def test_port_zero_is_one_free_port_shared_by_the_ranks():
    r = gather(CTX, worker, 2, ["ok", "ok"], 0, 30)
    port = r.got[0][2]
    assert 0 < port < 65536 and r.got[1][2] == port


@pytest.mark.parametrize("kind", ["skip", "error"])
def test_a_rank_that_raises_stops_the_gathering_and_its_killed_peer_is_not_counted_as_died(kind):
    t0 = time.monotonic()
    r = gather(CTX, worker, 2, [kind, "wait"], 0, 30, grace_s=0.5)
    assert (r.skipped if kind == "skip" else r.errors) == [f"rank 0: {kind} on rank 0"]
    assert (r.errors if kind == "skip" else r.skipped) == []
    assert r.died == [] and r.missing == [0, 1] and r.got == {}
    assert time.monotonic() - t0 < 10  # the peer is killed, not waited for


def test_a_rank_killed_by_a_signal_is_reported_at_once_by_name():
    t0 = time.monotonic()
    r = gather(CTX, worker, 2, ["wait", "segv"], 0, 60, grace_s=0.5)
    assert r.died == ["rank 1 terminated with signal SIGSEGV"]  # what tools/gpu-stress counts as a crash
    assert r.errors == [] and r.missing == [0, 1]
    assert time.monotonic() - t0 < 30  # not at the deadline


def test_a_rank_that_exits_without_an_answer_stops_the_gathering():
    t0 = time.monotonic()
    r = gather(CTX, worker, 2, ["wait", "exit"], 0, 60, grace_s=0.5)
    assert r.missing == [0, 1] and r.died == [] and r.errors == []
    assert time.monotonic() - t0 < 30


def test_a_crash_in_teardown_after_every_answer_is_counted():
    r = gather(CTX, worker, 2, ["ok", "ok+segv"], 0, 30, grace_s=5)
    assert sorted(r.got) == [0, 1] and r.missing == []
    assert r.died == ["rank 1 terminated with signal SIGSEGV"]


def test_a_rank_that_never_answers_is_missing_at_the_deadline():
    r = gather(CTX, worker, 2, ["ok", "wait"], 0, 2, grace_s=0.5)
    assert sorted(r.got) == [0] and r.missing == [1] and r.died == [] and r.errors == []
