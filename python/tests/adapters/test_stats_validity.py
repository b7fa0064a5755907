# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.stats never diverges silently and never hangs on one rank's bad value,
over gloo with 4 CPU processes and sub-groups of 2 and 3 ranks, in one spawn:

* a type change on one rank after the steady state (int -> bool, bool -> int, int -> float):
  collective_mismatch on every rank, then the group reduces correctly again;
* a bad value on one rank (an int past int64, a str, a numpy datetime), cold (first call of a
  group) and warm (steady state), max and gather: invalid_argument on every rank within a second,
  naming the rank, the key and the value; the rank that raised goes on, and its next call pairs
  with the others' next call (no result mixes two calls);
* an empty report on one rank: an error on every rank, not a hang;
* peaks per phase reduced with the rank holding each, and the training_log drop-in;
* a fuzz of per-rank types and values after a steady state: every call gives every rank the same
  result or the same error class;
* last, a rank that dies: the others get headroom.group_aborted within the group's timeout.
"""
import datetime
import os
import pickle
import random
import time
import traceback

import numpy as np
import pytest
import torch.distributed as dist
import spawned

import headroom
from headroom.torch import stats as hs

WORLD = 4
TIMEOUT_S = 20  # the process group's timeout: a hang would end the test after it, failing


def outcome(fn):
    start = time.perf_counter()
    try:
        res = ("ok", fn())
    except headroom.error as e:
        res = (type(e).__name__, str(e))
    except Exception:  # noqa: BLE001 - reported to the parent with its traceback
        res = ("crash", traceback.format_exc())
    return res + (time.perf_counter() - start,)


def fuzz_value(rng, rank, base):
    """A per-rank change drawn from the round's seed (the same draw on every rank)."""
    return rng.choice([
        base, base, base, True, float(base), 2**64, "x", np.datetime64("2026-01-01"), None, 2**63 - 1 - rank,
        np.int64(base), np.float32(0.5),
    ])


def scenarios(rank):
    out = {}
    sub3 = dist.new_group([0, 1, 2])
    sub2 = dist.new_group([1, 3])

    # 1. a type change on one rank after the steady state (the first defect)
    for name, group, members in (("world", None, range(WORLD)), ("sub2", sub2, (1, 3))):
        if rank not in members:
            continue
        first, second = members[0], members[1]
        out[f"{name}/steady"] = [outcome(lambda: hs.max_memory_report({"count": 1}, group)) for _ in range(2)]
        mine = {"count": True} if rank == first else {"count": 2**60 + 3} if rank == second else {"count": 5}
        out[f"{name}/int_to_bool"] = outcome(lambda: hs.max_memory_report(mine, group))
        out[f"{name}/after"] = outcome(lambda: hs.max_memory_report({"count": 10 + rank}, group))
        out[f"{name}/steady_bool"] = [outcome(lambda: hs.max_memory_report({"count": rank == second}, group))
                                      for _ in range(2)]
        mine = {"count": 7} if rank == first else {"count": False}
        out[f"{name}/bool_to_int"] = outcome(lambda: hs.gather(mine, group))
        out[f"{name}/after_gather"] = outcome(lambda: hs.gather({"count": 10 + rank}, group))

    # 2. a bad value on one rank, cold and warm, max and gather; the bad rank goes on
    hs.forget_agreements()  # on every rank, as every group's agreement is dropped
    if rank in (0, 1, 2):
        bad = {"a": 2**64, "b": 2.5} if rank == 1 else {"a": 5 + rank, "b": 2.5}
        out["cold_past_int64"] = outcome(lambda: hs.max_memory_report(bad, sub3))
        out["cold_next"] = outcome(lambda: hs.max_memory_report({"a": rank, "b": 0.5 * rank}, sub3))
        out["warm_next"] = outcome(lambda: hs.max_memory_report({"a": rank, "b": 0.5 * rank}, sub3))
        for label, value in (("str", "12"), ("datetime", np.datetime64("2026-01-01")), ("past_int64", -(2**63) - 1)):
            bad = {"a": value, "b": 1.0} if rank == 2 else {"a": rank, "b": 1.0}
            out[f"warm_{label}"] = outcome(lambda: hs.max_memory_report(bad, sub3))
            out[f"warm_{label}_next"] = outcome(lambda: hs.max_memory_report({"a": 100 + rank, "b": 1.0}, sub3))
        bad = {"a": "n/a", "b": 1.0} if rank == 0 else {"a": rank, "b": 1.0}
        out["gather_str"] = outcome(lambda: hs.gather(bad, sub3))
        out["gather_next"] = outcome(lambda: hs.gather({"a": 100 + rank, "b": 1.0}, sub3))
        # empty on one rank only: the empty report joins, everyone raises
        out["empty_on_2"] = outcome(lambda: hs.max_memory_report({} if rank == 2 else {"a": 1, "b": 1.0}, sub3))
        out["empty_next"] = outcome(lambda: hs.max_memory_report({"a": rank, "b": 1.0}, sub3))

    # 3. peaks per phase, and the training_log drop-in, over the world
    peak = {"now": 0}
    phases = hs.Phases(reset=lambda: peak.update(now=1000), read=lambda: {"allocated_bytes.all.peak": peak["now"]})
    for micro in range(2):
        with phases("forward"):
            peak["now"] += 100 * (rank + 1) * (micro + 1)
    with phases("backward"):
        peak["now"] += 5000 if rank == 2 else 10
    with phases("optimizer"):
        pass
    out["phases_local"] = phases.report()
    out["phases"] = outcome(lambda: {k: (v.max, v.argmax_rank) for k, v in phases.reduce().items()})
    with phases("forward"):
        peak["now"] += 1
    out["training_log"] = outcome(lambda: hs.training_log_memory({"reserved_bytes.all.peak": 10 * rank}, phases=phases))

    # 4. the fuzz: random per-rank types and values after a steady state
    fuzz = []
    for round_ in range(60):
        rng = random.Random(round_)
        changed = {r for r in range(WORLD) if rng.random() < 0.25}
        draws = [fuzz_value(rng, r, 3) for r in range(WORLD)]
        op = rng.choice(["max", "gather"])
        mine = {"a": draws[rank] if rank in changed else 3 + rank, "b": 0.25 * rank}
        if rank in changed and rng.random() < 0.2:
            mine = dict(reversed(list(mine.items())))
        fn = hs.max_memory_report if op == "max" else hs.gather
        res = outcome(lambda: fn(mine))
        if res[0] == "ok" and op == "gather":
            res = ("ok", {k: (v.values, v.max, v.min, v.argmax_rank, v.argmin_rank) for k, v in res[1].items()},
                   res[2])
        fuzz.append(res)
    out["fuzz"] = fuzz
    return out


def worker(rank, init_file, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    result = scenarios(rank)
    hs.max_memory_report({"last": 1})  # every rank is here: the group is in step
    if rank == WORLD - 1:
        os._exit(0)  # dies mid-step: the others' next collective fails
    result["after_death"] = outcome(lambda: hs.max_memory_report({"last": 2}))
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)
    os._exit(0)  # no teardown: the group lost a rank


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("stats_validity")
    spawned.spawn(worker, args=(str(d / "init"), str(d)), nprocs=WORLD)
    out = []
    for r in range(WORLD - 1):
        with open(d / f"rank{r}.pkl", "rb") as f:
            out.append(pickle.load(f))
    for r, res in enumerate(out):
        crashes = {k: v for k, v in res.items() if isinstance(v, tuple) and v[0] == "crash"}
        assert not crashes, f"rank {r}: {crashes}"
    return out


def test_a_type_change_on_one_rank_after_the_steady_state_raises_everywhere(results):
    for name, members in (("world", range(WORLD - 1)), ("sub2", (1,))):
        for rank in members:
            res = results[rank]
            assert [s[:2] for s in res[f"{name}/steady"]] == [("ok", {"count": 1})] * 2
            status, msg, _ = res[f"{name}/int_to_bool"]
            assert status == "collective_mismatch" and "different keys" in msg, (name, rank, msg)
            assert res[f"{name}/after"][:2] == ("ok", {"count": 13})  # 10 + the highest rank, in both
            assert [s[:2] for s in res[f"{name}/steady_bool"]] == [("ok", {"count": True})] * 2
            assert res[f"{name}/bool_to_int"][0] == "collective_mismatch"
            assert res[f"{name}/after_gather"][0] == "ok"


def test_a_bad_value_raises_on_every_rank_within_a_second_naming_rank_key_value(results):
    expect = {
        "cold_past_int64": "rank 1 of 3 has a value that is not a statistic (key 'a' = 18446744073709551616",
        "warm_str": "rank 2 of 3 has a value that is not a statistic (key 'a' = '12' (str)",
        "warm_datetime": "rank 2 of 3 has a value that is not a statistic (key 'a' = np.datetime64('2026-0...; "
                         "expected an int, float or bool)",  # a long repr is cut to fit the wire
        "warm_past_int64": "rank 2 of 3 has a value that is not a statistic (key 'a' = -9223372036854775809",
        "gather_str": "rank 0 of 3 has a value that is not a statistic (key 'a' = 'n/a' (str)",
    }
    for rank in range(3):
        res = results[rank]
        for name, text in expect.items():
            status, msg, seconds = res[name]
            assert status == "invalid_argument" and text in msg, (rank, name, msg)
            assert seconds < 1.0, (rank, name, seconds)
        # the next call pairs with the others' next call: this call's values, never a mix
        assert res["cold_next"][:2] == ("ok", {"a": 2, "b": 1.0})
        assert res["warm_next"][:2] == ("ok", {"a": 2, "b": 1.0})
        for label in ("str", "datetime", "past_int64"):
            assert res[f"warm_{label}_next"][:2] == ("ok", {"a": 102, "b": 1.0})
        status, table, _ = res["gather_next"]
        assert status == "ok" and table["a"].values == (100, 101, 102) and table["a"].argmax_rank == 2
        assert res["empty_on_2"][0] == "collective_mismatch"
        assert res["empty_next"][:2] == ("ok", {"a": 2, "b": 1.0})


def test_peaks_per_phase_with_the_rank_holding_each(results):
    for rank, res in enumerate(results):
        assert res["phases_local"] == {"forward/allocated_bytes.all.peak": 1000 + 200 * (rank + 1),
                                       "backward/allocated_bytes.all.peak": 1000 + (5000 if rank == 2 else 10),
                                       "optimizer/allocated_bytes.all.peak": 1000}
        assert res["phases"][:2] == ("ok", {"forward/allocated_bytes.all.peak": (1800, 3),
                                            "backward/allocated_bytes.all.peak": (6000, 2),
                                            "optimizer/allocated_bytes.all.peak": (1000, 0)})
        assert res["training_log"][:2] == ("ok", {"memory/reserved_bytes.all.peak": 30,
                                                  "memory/reserved_bytes.all.peak.rank": 3,
                                                  "memory/forward/allocated_bytes.all.peak": 1001,
                                                  "memory/forward/allocated_bytes.all.peak.rank": 0})


def test_fuzz_never_diverges(results):
    kinds = {"ok": 0, "invalid_argument": 0, "collective_mismatch": 0}
    for round_, calls in enumerate(zip(*(res["fuzz"] for res in results))):
        statuses = {c[0] for c in calls}
        assert len(statuses) == 1, (round_, calls)
        status = statuses.pop()
        kinds[status] += 1
        if status == "ok":
            assert all(c[1] == calls[0][1] for c in calls), (round_, calls)
    assert kinds["ok"] > 0 and kinds["invalid_argument"] > 0 and kinds["collective_mismatch"] > 0, kinds


def test_a_rank_that_dies_is_an_error_within_the_timeout(results):
    for res in results:
        status, msg, seconds = res["after_death"]
        assert status == "group_aborted" and "a rank died or timed out" in msg
        assert seconds < TIMEOUT_S + 5
