# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.stats' steady state (the fast path) on CPU: gloo, three processes. The same
sequence of calls runs twice in one spawn: once as a user makes it (the fast path taken whenever
the keys, their order and their value types are those of the group's last reduction) and once
with the steady state dropped before every call (the general path only). Every call must give
the same result (values bit for bit, types, key order) or the same error (class and message) on
every rank, and the fast path must be taken exactly where nothing changed."""
import math
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
BIG = 2**53 + 1


def base(rank):
    return {
        "allocated_bytes.all.peak": BIG if rank == 1 else 1000 + rank,
        "num_alloc_retries": 3 - rank,
        "reserved_gb": [1.5, -2.0, 0.25][rank],
        "near_zero": [-0.0, -1e-300, -5.0][rank],
        "nan_on_1": [1.0, math.nan, 2.0][rank],
        "int64.max": 2**63 - 1 - rank,
        "int64.min": -(2**63) + rank,
        "oom": rank == 2,
    }


def canonical(value):
    """A result in a comparable form: floats by their bits (NaN, -0.0), types named, order kept."""
    if isinstance(value, dict):
        return [(k, canonical(v)) for k, v in value.items()]
    if isinstance(value, hs.KeyStats):
        return ("KeyStats", canonical(value.values), canonical(value.max), canonical(value.min),
                canonical(value.mean), value.argmax_rank, value.argmin_rank)
    if isinstance(value, tuple):
        return tuple(canonical(v) for v in value)
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    return (type(value).__name__, value)


def scenarios(rank):
    """(name, call) in order; each call runs on every rank."""
    mine = base(rank)
    steps = []

    def add(name, fn):
        steps.append((name, fn))

    add("first", lambda: hs.max_memory_report(mine))
    add("steady", lambda: hs.max_memory_report(mine))
    add("steady_gather", lambda: hs.gather(mine))
    add("steady_keys", lambda: hs.max_memory_report(mine, keys=["reserved_gb", "num_alloc_retries"]))
    add("steady_keys_again", lambda: hs.max_memory_report(mine, keys=["reserved_gb", "num_alloc_retries"]))
    add("back_to_all", lambda: hs.max_memory_report(mine))
    add("back_to_all_again", lambda: hs.max_memory_report(mine))
    # a value's type changes from int to float on every rank: the general path, a float result
    as_float = dict(mine, num_alloc_retries=float(mine["num_alloc_retries"]))
    add("int_to_float_everywhere", lambda: hs.max_memory_report(as_float))
    add("int_to_float_steady", lambda: hs.max_memory_report(as_float))
    add("float_to_int_back", lambda: hs.max_memory_report(mine))
    # bool -> int on every rank
    as_int = dict(mine, oom=int(mine["oom"]))
    add("bool_to_int_everywhere", lambda: hs.max_memory_report(as_int))
    add("int_to_bool_back", lambda: hs.max_memory_report(mine))
    # int -> float on one rank only: every rank raises, the group goes on
    one_float = dict(mine)
    if rank == 1:
        one_float["num_alloc_retries"] = float(one_float["num_alloc_retries"])
    add("int_to_float_on_rank1", lambda: hs.max_memory_report(one_float))
    add("after_type_mismatch", lambda: hs.max_memory_report(mine))
    add("after_type_mismatch_steady", lambda: hs.max_memory_report(mine))
    # a key added on every rank: more keys than the plan holds, the ranks agree again
    added = dict(mine, added_key=10 + rank)
    add("key_added_everywhere", lambda: hs.max_memory_report(added))
    add("key_added_steady", lambda: hs.max_memory_report(added))
    add("key_added_gather", lambda: hs.gather(added))
    add("key_removed_everywhere", lambda: hs.max_memory_report(mine))
    add("key_removed_steady", lambda: hs.max_memory_report(mine))
    # a key added on one rank only
    one_added = dict(mine)
    if rank == 2:
        one_added["extra_key"] = 7
    add("key_added_on_rank2", lambda: hs.max_memory_report(one_added))
    add("after_added_mismatch", lambda: hs.max_memory_report(mine))
    # the same keys in another order: on every rank, then on one rank only
    reversed_keys = dict(reversed(list(mine.items())))
    add("reordered_everywhere", lambda: hs.max_memory_report(reversed_keys))
    add("reordered_steady", lambda: hs.max_memory_report(reversed_keys))
    add("reordered_gather", lambda: hs.gather(reversed_keys))
    add("original_order", lambda: hs.max_memory_report(mine))
    one_reordered = reversed_keys if rank == 0 else mine
    add("reordered_on_rank0", lambda: hs.max_memory_report(one_reordered))
    add("reordered_on_rank0_again", lambda: hs.max_memory_report(one_reordered))
    add("restore_order", lambda: hs.max_memory_report(mine))  # rank 0 back to the original order
    # a key renamed on one rank after agreement (as many keys): every rank raises
    renamed = dict(mine)
    if rank == 2:
        renamed["oom2"] = renamed.pop("oom")
    add("renamed_on_rank2", lambda: hs.max_memory_report(renamed))
    add("renamed_gather_on_rank2", lambda: hs.gather(renamed))
    add("after_renamed", lambda: hs.max_memory_report(mine))
    add("after_renamed_steady", lambda: hs.max_memory_report(mine))
    # values that are not plain numbers, and ints past int64, on every rank (no collective)
    with_tensor = dict(mine, reserved_gb=torch.tensor(mine["reserved_gb"], dtype=torch.float64))
    add("tensor_value", lambda: hs.max_memory_report(with_tensor))
    add("tensor_value_again", lambda: hs.max_memory_report(with_tensor))
    add("plain_again", lambda: hs.max_memory_report(mine))
    too_big = dict(mine, num_alloc_retries=2**63)
    add("int_past_int64", lambda: hs.max_memory_report(too_big))
    bad = dict(mine, num_alloc_retries="3")
    add("str_value", lambda: hs.max_memory_report(bad))
    add("gather_int_past_int64", lambda: hs.gather(too_big))
    add("after_bad_values", lambda: hs.max_memory_report(mine))
    add("after_bad_values_gather", lambda: hs.gather(mine))
    return mine, steps


def run(rank, general_only):
    hs.forget_agreements()
    used = []
    real_pack = hs._Fast.pack

    def counted(self, chosen, op):
        words = real_pack(self, chosen, op)
        used.append(words is not None)
        return words

    hs._Fast.pack = counted
    mine, steps = scenarios(rank)
    snapshot = canonical(mine)
    out = []
    try:
        for name, fn in steps:
            if general_only:
                hs._fast.clear()  # the steady state dropped: the general path, agreement kept
            used.clear()
            try:
                res = fn()
                out.append((name, "ok", canonical(res), any(used), res is mine))
            except headroom.error as e:
                out.append((name, type(e).__name__, str(e), any(used), False))
            except Exception as e:  # noqa: BLE001 - reported to the parent
                out.append((name, "crash", traceback.format_exc(), any(used), False))
    finally:
        hs._Fast.pack = real_pack
    return {"calls": out, "not_mutated": canonical(mine) == snapshot}


def worker(rank, init_file, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        result = {"fast": run(rank, False), "general": run(rank, True)}
    finally:
        dist.barrier()
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("stats_steady")
    spawned.spawn(worker, args=(str(d / "init"), str(d)), nprocs=WORLD)
    out = []
    for r in range(WORLD):
        with open(d / f"rank{r}.pkl", "rb") as f:
            out.append(pickle.load(f))
    for r, res in enumerate(out):
        for mode in ("fast", "general"):
            crashes = [c for c in res[mode]["calls"] if c[1] == "crash"]
            assert not crashes, f"rank {r} {mode}: {crashes}"
    return out


def by_name(res, mode):
    return {c[0]: c for c in res[mode]["calls"]}


def test_fast_path_gives_what_the_general_path_gives(results):
    for rank, res in enumerate(results):
        fast, general = res["fast"]["calls"], res["general"]["calls"]
        assert [c[0] for c in fast] == [c[0] for c in general]
        for f, g in zip(fast, general):
            assert f[:3] == g[:3], f"rank {rank}, {f[0]}: fast path {f[1:3]} != general path {g[1:3]}"
            assert not f[4] and not g[4]  # never the input itself
        assert not any(c[3] for c in general)  # the reference never took the fast path
        assert res["fast"]["not_mutated"] and res["general"]["not_mutated"]


def test_fast_path_taken_only_where_nothing_changed(results):
    steady = {"steady", "steady_gather", "steady_keys_again", "back_to_all_again", "int_to_float_steady",
              "after_type_mismatch_steady", "key_added_steady", "key_added_gather", "key_removed_steady",
              "reordered_steady", "reordered_gather", "reordered_on_rank0_again", "after_renamed_steady",
              "after_bad_values", "after_bad_values_gather"}
    changed = {"first", "steady_keys", "back_to_all", "int_to_float_everywhere", "float_to_int_back",
               "bool_to_int_everywhere", "int_to_bool_back", "after_type_mismatch", "key_added_everywhere",
               "key_removed_everywhere", "after_added_mismatch", "reordered_everywhere", "original_order",
               "after_renamed", "tensor_value", "tensor_value_again", "int_past_int64", "str_value",
               "gather_int_past_int64",
               "plain_again"}  # a reduction with a tensor value leaves no steady state: the general path once
    for rank, res in enumerate(results):
        calls = by_name(res, "fast")
        for name in steady:
            assert calls[name][3], f"rank {rank}: {name} did not take the fast path"
        for name in changed:
            assert not calls[name][3], f"rank {rank}: {name} took the fast path"
        # one rank changed: that rank takes the general path, the others the fast one
        changed_rank = {"int_to_float_on_rank1": 1, "key_added_on_rank2": 2, "reordered_on_rank0": 0,
                        "renamed_on_rank2": 2, "restore_order": 0}
        for name, who in changed_rank.items():
            assert calls[name][3] == (rank != who), f"rank {rank}: {name}"


def test_invalidations_behave(results):
    for rank, res in enumerate(results):
        calls = by_name(res, "fast")
        first = calls["first"][2]
        assert calls["steady"][2] == first and calls["after_renamed_steady"][2] == first
        # int -> float everywhere: the key comes back a float
        got = dict(calls["int_to_float_everywhere"][2])
        assert calls["int_to_float_everywhere"][1] == "ok" and got["num_alloc_retries"] == ("float", (3.0).hex())
        assert dict(calls["float_to_int_back"][2])["num_alloc_retries"] == ("int", 3)
        assert dict(calls["bool_to_int_everywhere"][2])["oom"] == ("int", 1)
        assert dict(calls["int_to_bool_back"][2])["oom"] == ("bool", True)
        # int -> float on one rank, a key added on one rank, a key renamed on one: every rank raises
        for name in ("int_to_float_on_rank1", "key_added_on_rank2", "renamed_on_rank2", "renamed_gather_on_rank2"):
            assert calls[name][1] == "collective_mismatch", (rank, name, calls[name])
        assert calls["after_type_mismatch"][2] == first and calls["after_added_mismatch"][2] == first
        # a key added everywhere: agreed again, the max has it
        assert dict(calls["key_added_everywhere"][2])["added_key"] == ("int", 12)
        assert calls["key_added_steady"][2] == calls["key_added_everywhere"][2]
        # the same keys in another order: the result in the caller's order, the same values
        assert [k for k, _ in calls["reordered_everywhere"][2]] == list(reversed([k for k, _ in first]))
        assert sorted(calls["reordered_everywhere"][2]) == sorted(first)
        mine_order = [k for k, _ in calls["reordered_on_rank0"][2]]
        assert mine_order == ([k for k, _ in first][::-1] if rank == 0 else [k for k, _ in first])
        assert sorted(calls["reordered_on_rank0"][2]) == sorted(first)
        # exact beyond 2^53 and at the int64 ends, NaN propagating, -0.0 kept
        values = dict(first)
        assert values["allocated_bytes.all.peak"] == ("int", BIG)
        assert values["int64.max"] == ("int", 2**63 - 1) and values["int64.min"] == ("int", -(2**63) + 2)
        assert values["nan_on_1"] == ("float", "nan") and values["near_zero"] == ("float", (-0.0).hex())
        # bad values name the key, on the fast path's heels as on the general path
        assert calls["int_past_int64"][1] == "invalid_argument" and "'num_alloc_retries'" in calls["int_past_int64"][2]
        assert calls["str_value"][1] == "invalid_argument" and "key 'num_alloc_retries'" in calls["str_value"][2]
        assert calls["gather_int_past_int64"][1] == "invalid_argument"
        # gather through the fast path: the per-rank values and the holders
        table = dict(calls["steady_gather"][2])
        peak = table["allocated_bytes.all.peak"]
        assert peak[1] == (("int", 1000), ("int", BIG), ("int", 1002)) and peak[5] == 1 and peak[6] == 0
        nan_row = table["nan_on_1"]
        assert nan_row[2] == ("float", "nan") and nan_row[5] == 1  # NaN wins max and min, as in C++
        assert nan_row[3] == ("float", "nan") and nan_row[6] == 1
        zero_row = table["near_zero"]
        assert zero_row[2] == ("float", (-0.0).hex()) and zero_row[5] == 0 and zero_row[6] == 2
