import math

import numpy as np
import pytest

import headroom
from headroom import stats

BIG = 2**53  # beyond it a double cannot tell n from n + 1


def test_keys_are_pytorchs_names():
    assert stats.keys.allocated_bytes_peak == "allocated_bytes.all.peak"
    assert stats.keys.num_alloc_retries == "num_alloc_retries"
    assert stats.MEMORY_REPORT_KEYS == ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                                        "reserved_bytes.all.current", "reserved_bytes.all.peak",
                                        "num_alloc_retries", "num_ooms")
    assert "allocation.all.freed" in stats.ALLOCATOR_REPORT_KEYS


def test_memory_report_has_the_cpp_schema():
    torch_like = {k: i for i, k in enumerate(stats.MEMORY_REPORT_KEYS[::-1])}
    torch_like["active_bytes.all.peak"] = 7
    r = stats.memory_report(torch_like)
    assert r.keys() == list(stats.MEMORY_REPORT_KEYS)
    assert r.schema_hash == stats.memory_report_schema_hash()
    assert stats.Report({"num_ooms": 1}).schema_hash != stats.memory_report_schema_hash()
    with pytest.raises(headroom.invalid_argument, match="num_ooms"):
        stats.memory_report({k: 0 for k in stats.MEMORY_REPORT_KEYS if k != "num_ooms"})


def test_report_keeps_order_and_kinds():
    r = stats.report({"b": 1, "a": 2.5, "c": -(2**63)})
    assert r.keys() == ["b", "a", "c"] and r.kinds() == ["int64", "float64", "int64"]
    assert r["c"] == -(2**63) and r.as_dict() == {"b": 1, "a": 2.5, "c": -(2**63)}
    assert str(r) == "{b: 1, a: 2.5, c: -9223372036854775808}"
    assert r.prefixed("memory/").keys() == ["memory/b", "memory/a", "memory/c"]
    assert stats.report({"x": 3}) != stats.report({"x": 3.0})


def test_max_is_exact_beyond_2_53():
    ranks = [{"peak": BIG, "ratio": 0.5}, {"peak": BIG + 1, "ratio": -1.0}, {"peak": BIG - 7, "ratio": 0.25}]
    m = stats.max_of(ranks)
    assert m["peak"] == BIG + 1 and isinstance(m["peak"], int)
    assert m["ratio"] == 0.5
    assert float(BIG + 1) == float(BIG)  # why it matters: a float64 reduction would lose it


def test_nan_policies():
    ranks = [{"x": 1.0}, {"x": math.nan}, {"x": 3.0}]
    assert math.isnan(stats.max_of(ranks)["x"])
    assert stats.max_of(ranks, nan="ignore")["x"] == 3.0
    t = stats.gather_of(ranks, nan="ignore")
    assert t["x"].max == 3.0 and t["x"].argmax == 2


def test_gather_table():
    t = stats.gather_of([{"peak": 5, "free": 2.0}, {"peak": BIG + 3, "free": 1.0}, {"peak": BIG + 3, "free": 4.0}])
    assert t.ranks == 3 and len(t) == 2
    peak = t["peak"]
    assert peak.per_rank == [5, BIG + 3, BIG + 3] and peak.kind == "int64"
    assert (peak.max, peak.argmax, peak.min, peak.argmin) == (BIG + 3, 1, 5, 0)  # ties: lowest rank
    assert t["free"].mean == pytest.approx(7.0 / 3)
    assert t.maxima() == stats.report({"peak": BIG + 3, "free": 4.0})
    assert str(t).splitlines()[0].split() == ["key", "max", "(rank)", "min", "(rank)", "mean", "rank", "0", "rank",
                                              "1", "rank", "2"]


def test_wire_words_through_a_simulated_collective():
    # What the torch adapters do: pack, all_reduce(MAX) / all_gather the int64 words, unpack.
    ranks = [{"a": BIG + r, "b": float(-r)} for r in range(4)]
    plan = stats.ReducePlan(8)
    words = [stats.pack_max(r, plan) for r in ranks]
    assert all(w.dtype == np.int64 and len(w) == plan.max_words() == 14 for w in words)
    reduced = np.maximum.reduce(words)
    for r in range(4):
        assert stats.unpack_max(ranks[r], reduced, plan, r, 4) == stats.report({"a": BIG + 3, "b": 0.0})
    out = [stats.max_with(ranks[r], lambda w: reduced, rank=r, size=4, plan=plan) for r in range(4)]
    assert out[0] == out[3]
    # writer: only rank 2 gets the result
    wr = np.maximum.reduce([stats.pack_max(r, plan, 2) for r in ranks])
    assert [stats.unpack_max(ranks[r], wr, plan, r, 4) is None for r in range(4)] == [True, True, False, True]
    gathered = np.concatenate([stats.pack_gather(r, plan) for r in ranks])
    t = stats.gather_with(ranks[1], lambda w: gathered, rank=1, size=4, plan=plan)
    assert t["a"].per_rank == [BIG, BIG + 1, BIG + 2, BIG + 3]


def test_mismatched_reports_raise_collective_mismatch_on_every_rank():
    ranks = [{"a": 1, "b": 2}, {"b": 2, "a": 1}]
    with pytest.raises(headroom.collective_mismatch, match="differ in keys, order or element types"):
        stats.max_of(ranks)
    with pytest.raises(headroom.collective_mismatch, match="differ in keys"):
        stats.gather_of([{"a": 1}, {"a": 1.0}])
    plan = stats.ReducePlan(2)
    reduced = np.maximum.reduce([stats.pack_max(r, plan) for r in ranks])
    for r in range(2):
        with pytest.raises(headroom.collective_mismatch):
            stats.unpack_max(ranks[r], reduced, plan, r, 2)
    writers = np.maximum.reduce([stats.pack_max({"a": 1}, plan, 0), stats.pack_max({"a": 1}, plan, 1)])
    with pytest.raises(headroom.collective_mismatch, match="different writer ranks"):
        stats.unpack_max({"a": 1}, writers, plan, 0, 2)


@pytest.mark.parametrize("call, error, message", [
    (lambda: stats.report({"a": True}), TypeError, r"report\['a'\] = True; expected an int"),
    (lambda: stats.report({"a": "3"}), TypeError, r"report\['a'\] = '3'"),
    (lambda: stats.report({1: 3}), TypeError, "report key 1; expected a str"),
    (lambda: stats.report({"a": 2**63}), headroom.invalid_argument, "does not fit in a signed 64-bit"),
    (lambda: stats.report({"": 1}), headroom.invalid_argument, "empty key name"),
    (lambda: stats.Report([1, 2]), TypeError, "expected a headroom.stats.Report or a dict"),
    (lambda: stats.report({"a": 1})["b"], headroom.invalid_argument, 'no key "b"'),
    (lambda: stats.max_of([]), headroom.invalid_argument, "no reports"),
    (lambda: stats.max_of([{"a": 1}], nan="skip"), headroom.invalid_argument, "nan = 'skip'"),
    (lambda: stats.ReducePlan(-1), headroom.invalid_argument, "capacity = -1"),
    (lambda: stats.ReducePlan(2**25), headroom.invalid_argument, "exceeds the maximum"),
    (lambda: stats.unpack_max({"a": 1}, np.zeros(3, dtype=np.int64)), headroom.invalid_argument,
     "reduced words has 3 words; expected 7"),
    (lambda: stats.unpack_max({"a": 1}, [0] * 7), TypeError, "expected a 1-d contiguous int64"),
    (lambda: stats.unpack_max({"a": 1, "b": 2}, stats.pack_max({"a": 1, "b": 2}), stats.ReducePlan(1)),
     headroom.invalid_argument, "reduced words has 8 words; expected 7"),
    (lambda: stats.unpack_max({"a": 1, "b": 2}, stats.pack_max({"a": 1, "b": 2}, 1), 1), headroom.capacity_error,
     "has 2 keys but the reduce_plan holds 1"),
    (lambda: stats.unpack_max({"a": 1}, stats.pack_max({"a": 1}, None, 5), None, 0, 2), headroom.invalid_argument,
     r"writer rank 5 out of range \[0, 2\)"),
    (lambda: stats.unpack_gather({"a": 1}, stats.pack_gather({"a": 1}), None, 0, 2), headroom.invalid_argument,
     "gathered words has 4 words; expected 8"),
])
def test_bad_input_names_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_reduce_plan_sizes():
    p = stats.ReducePlan(5)
    assert (p.capacity, p.max_words(), p.gather_words_per_rank(), p.gather_words(4)) == (5, 11, 8, 32)
    assert str(p).startswith("stats::reduce_plan{capacity 5 keys") and p == stats.ReducePlan(5)
    assert len(stats.pack_gather({"a": 1}, p)) == 8


def test_dict_values_write_and_read_the_wire_words():
    """pack_dict_values / unpack_dict_values (the torch adapter's steady state): the words
    pack_max / pack_gather write for the sorted report, from a dict in another order."""
    values = {"z": 1.5, "a": -(2**63), "m": True, "b": math.nan, "y": -0.0, "c": 2**63 - 1, "x": -math.inf,
              "d": False, "e": 2**53 + 1}
    keys = tuple(values)
    kinds = b"".join(b"b" if type(v) is bool else b"i" if type(v) is int else b"f" for v in values.values())
    order = sorted(keys)
    slots = np.array([order.index(k) for k in keys], dtype=np.int64)
    r = stats.report({k: int(values[k]) if type(values[k]) is bool else values[k] for k in order})
    plan = stats.ReducePlan(len(values) + 3)
    ref = stats.pack_max(r, plan)
    words = np.full(plan.max_words(), np.iinfo(np.int64).min, dtype=np.int64)
    words[:6] = ref[:6]
    assert stats.pack_dict_values(values, keys, kinds, slots, words, 6, True)
    assert (words == ref).all()
    gref = stats.pack_gather(r, plan)
    gwords = np.zeros(plan.gather_words_per_rank(), dtype=np.int64)
    gwords[:3] = gref[:3]
    assert stats.pack_dict_values(values, keys, kinds, slots, gwords, 3, False)
    assert (gwords == gref).all()
    back = stats.unpack_dict_values(words, ref[:6].copy(), keys, kinds, slots, 6, True)
    assert list(back) == list(keys) and [type(v) for v in back.values()] == [type(v) for v in values.values()]
    assert math.isnan(back["b"]) and str(back["y"]) == "-0.0" and back["e"] == 2**53 + 1 and back["a"] == -(2**63)
    assert {k: v for k, v in back.items() if k != "b"} == {k: v for k, v in values.items() if k != "b"}
    other = ref[:6].copy()
    other[0] ^= 1
    assert stats.unpack_dict_values(words, other, keys, kinds, slots, 6, True) is None
    # another order, type, key set or an int past int64: False (the caller's general path)
    for changed in (dict(reversed(list(values.items()))), dict(values, e=1.0), dict(values, m=1),
                    dict(values, e=2**63), dict(values, extra=1), {k: values[k] for k in keys[:-1]}):
        assert not stats.pack_dict_values(changed, keys, kinds, slots, words.copy(), 6, True)
    with pytest.raises(headroom.invalid_argument, match="kinds has 2 entries"):
        stats.pack_dict_values(values, keys, b"ii", slots, words, 6, True)
    with pytest.raises(headroom.invalid_argument, match="expected 'i', 'b' or 'f'"):
        stats.pack_dict_values(values, keys, b"q" * len(keys), slots, words, 6, True)
    with pytest.raises(TypeError, match="writable"):
        stats.pack_dict_values(values, keys, kinds, slots, words.astype(np.float64), 6, True)
