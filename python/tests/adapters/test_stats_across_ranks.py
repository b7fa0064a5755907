# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.stats on CPU: gloo, three processes (torch.multiprocessing spawn), one of them
with different keys. Every scenario runs in one spawn (starting processes is the slow part); each
test checks one scenario's results from every rank."""
import os
import pickle
import traceback

import pytest
import torch
import torch.distributed as dist
import spawned

import headroom
from headroom.torch import stats as hs

WORLD = 3
BIG = 2**53 + 1  # not a float64: float64 all-reduces lose it


def report(rank):
    return {
        "allocated_bytes.all.peak": BIG if rank == 1 else 1000 + rank,  # rank 1 holds the max
        "num_alloc_retries": 3 - rank,
        "reserved_gb": [1.5, -2.0, 0.25][rank],
        "near_zero": [-0.0, -1e-300, -5.0][rank],
        "oom": rank == 2,
    }


def run_scenarios(rank):
    out = {}

    def record(name, fn):
        try:
            out[name] = ("ok", fn())
        except headroom.error as e:
            out[name] = ("error", type(e).__name__, str(e))
        except Exception as e:  # noqa: BLE001 - reported to the parent with its traceback
            out[name] = ("crash", type(e).__name__, traceback.format_exc())

    mine = report(rank)
    copy = dict(mine)
    record("max", lambda: hs.max_memory_report(mine))
    out["not_mutated"] = mine == copy
    record("max_again", lambda: hs.max_memory_report(mine))  # steady state: one collective
    record("keys", lambda: hs.max_memory_report(mine, keys=["num_alloc_retries", "reserved_gb"]))
    record("gather", lambda: {k: vars(v) if hasattr(v, "__dict__") else v._asdict() for k, v in hs.gather(mine).items()})
    # a rank whose keys changed after the agreement: every rank raises, nobody hangs
    changed = dict(mine)
    if rank == 2:
        changed["extra_key"] = 7
    record("changed_keys", lambda: hs.max_memory_report(changed))
    record("after_changed", lambda: hs.max_memory_report(mine))  # group still usable, re-agrees
    renamed = dict(mine)
    if rank == 2:
        renamed["oom2"] = renamed.pop("oom")  # as many keys as agreed, one of them another
    record("renamed_key", lambda: hs.max_memory_report(renamed))
    record("after_renamed", lambda: hs.gather(mine))
    # disagreement found by the first agreement of a new group
    sub = dist.new_group([0, 1, 2])
    diff = dict(mine)
    if rank == 2:
        del diff["num_alloc_retries"]
        diff["only_on_2"] = 1
    record("differing_keys", lambda: hs.max_memory_report(diff, sub))
    typed = dict(mine)
    if rank == 0:
        typed["num_alloc_retries"] = 3.0
    record("differing_types", lambda: hs.max_memory_report(typed, sub))
    record("sub_after", lambda: hs.max_memory_report(mine, sub))
    # a group of one: no collective, a copy
    solo = [dist.new_group([r]) for r in range(WORLD)][rank]
    res = hs.max_memory_report(mine, solo)
    out["solo"] = (res == mine, res is mine)
    # Megatron-Bridge's call shape
    record("bridge", lambda: hs.reduce_max_memory_across_pp_group(mine, sub))
    out["bridge_solo_is_input"] = hs.reduce_max_memory_across_pp_group(mine, solo) is mine
    record("bad_value", lambda: hs.max_memory_report({"x": "12"}))
    record("too_big", lambda: hs.max_memory_report({"x": 2**64}))
    return out


def worker(rank, init_file, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        result = run_scenarios(rank)
    finally:
        dist.barrier()
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("stats")
    spawned.spawn(worker, args=(str(d / "init"), str(d)), nprocs=WORLD)
    out = []
    for r in range(WORLD):
        with open(d / f"rank{r}.pkl", "rb") as f:
            out.append(pickle.load(f))
    for r, res in enumerate(out):
        crashes = {k: v for k, v in res.items() if isinstance(v, tuple) and v and v[0] == "crash"}
        assert not crashes, f"rank {r}: {crashes}"
    return out


def test_max_is_exact_typed_and_the_same_on_every_rank(results):
    expected = {
        "allocated_bytes.all.peak": BIG,
        "num_alloc_retries": 3,
        "reserved_gb": 1.5,
        "near_zero": -0.0,
        "oom": True,
    }
    for res in results:
        status, got = res["max"]
        assert status == "ok" and got == expected
        assert list(got) == list(expected)  # the report's order
        assert type(got["allocated_bytes.all.peak"]) is int and type(got["num_alloc_retries"]) is int
        assert type(got["reserved_gb"]) is float and type(got["oom"]) is bool
        assert str(got["near_zero"]) == "-0.0"  # -0.0 is the max of {-0.0, -1e-300, -5}
        assert res["max_again"] == res["max"]
        assert res["not_mutated"]


def test_float64_would_have_lost_the_counter():
    assert float(BIG) == float(BIG - 1)  # what Megatron-Bridge's float64 all-reduce returns


def test_keys_selects_in_order(results):
    for res in results:
        assert res["keys"] == ("ok", {"num_alloc_retries": 3, "reserved_gb": 1.5})


def test_gather_table(results):
    for res in results:
        status, table = res["gather"]
        assert status == "ok"
        peak = table["allocated_bytes.all.peak"]
        assert peak["values"] == (1000, BIG, 1002)
        assert peak["max"] == BIG and peak["argmax_rank"] == 1
        assert peak["min"] == 1000 and peak["argmin_rank"] == 0
        assert peak["mean"] == (1000 + BIG + 1002) / 3
        assert table["reserved_gb"]["values"] == (1.5, -2.0, 0.25) and table["reserved_gb"]["argmax_rank"] == 0
        assert table["num_alloc_retries"]["mean"] == 2.0


def test_a_rank_whose_keys_changed_makes_every_rank_raise(results):
    for rank, res in enumerate(results):
        # one key more than agreed: every rank agrees again, which names the key and the ranks
        status, cls, msg = res["changed_keys"]
        assert status == "error" and cls == "collective_mismatch"
        assert "rank 0: 5 keys, missing ['extra_key']" in msg and "rank 2: 6 keys" in msg
        assert res["after_changed"] == res["max"]  # the group is still usable
        # as many keys, one renamed: the one collective's header differs on every rank
        status, cls, msg = res["renamed_key"]
        assert status == "error" and cls == "collective_mismatch"
        if rank == 2:
            assert "this rank's keys differ" in msg and "added here: ['oom2']; missing here: ['oom']" in msg
        else:
            assert "another rank's keys or types differ" in msg
        assert res["after_renamed"][0] == "ok"
        assert res["after_renamed"][1]["oom"].values == (False, False, True)


def test_differing_keys_name_the_rank_and_keys(results):
    for res in results:
        status, cls, msg = res["differing_keys"]
        assert status == "error" and cls == "collective_mismatch"
        assert "rank 2: 5 keys, missing ['num_alloc_retries']" in msg
        assert "rank 0: 5 keys, missing ['only_on_2']" in msg
        status, cls, msg = res["differing_types"]
        assert cls == "collective_mismatch" and "'num_alloc_retries' is float/int" in msg
        assert res["sub_after"] == res["max"]


def test_group_of_one_is_a_copy(results):
    for res in results:
        assert res["solo"] == (True, False)


def test_bridge_drop_in(results):
    for res in results:
        assert res["bridge"] == res["max"]
        assert res["bridge_solo_is_input"]


def test_bad_values_name_the_key(results):
    for res in results:
        # every rank has the bad value here: the agreement names the lowest rank, on every rank
        assert res["bad_value"][1] == "invalid_argument"
        assert "rank 0 of 3 has a value that is not a statistic (key 'x' = '12' (str); expected an int, float or " \
            "bool)" in res["bad_value"][2]
        assert res["too_big"][1] == "invalid_argument"
        assert "key 'x' = 18446744073709551616; expected an int that fits in int64" in res["too_big"][2]


def test_without_distributed_it_is_a_copy():
    assert not dist.is_initialized()
    r = {"a": 1, "b": 2.5}
    out = hs.max_memory_report(r)
    assert out == r and out is not r
    assert hs.reduce_max_memory_across_pp_group(r, None) is r
    g = hs.gather(r)
    assert g["a"].values == (1,) and g["a"].argmax_rank == 0
    with pytest.raises(headroom.invalid_argument, match=r"key 'zz' is not in the report"):
        hs.max_memory_report(r, keys=["zz"])
    with pytest.raises(headroom.invalid_argument, match=r"report of type list"):
        hs.max_memory_report([1, 2])
