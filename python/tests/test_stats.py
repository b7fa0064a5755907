# SPDX-License-Identifier: Apache-2.0
import math
import pathlib
import re

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
    assert all(w.dtype == np.int64 and len(w) == plan.max_words() for w in words)
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
    (lambda: stats.report({"a": True}), TypeError, r"report\['a'\] = True \(bool\); expected an int"),
    (lambda: stats.report({"a": np.bool_(True)}), TypeError, r"report\['a'\] = np.True_ \(bool\); expected an int"),
    (lambda: stats.report({"a": np.datetime64("2020-01-01")}), TypeError, r"datetime64\('2020-01-01'\) \(datetime64\)"),
    (lambda: stats.report({"a": np.str_("x")}), TypeError, r"report\['a'\] = np.str_\('x'\) \(str_\)"),
    (lambda: stats.report({"a": 1j}), TypeError, r"report\['a'\] = 1j \(complex\)"),
    (lambda: stats.report({"a": "3"}), TypeError, r"report\['a'\] = '3'"),
    (lambda: stats.report({1: 3}), TypeError, "report key 1; expected a str"),
    (lambda: stats.report({"a": 2**63}), headroom.invalid_argument, "= 9223372036854775808 does not fit in int64"),
    (lambda: stats.report({"": 1}), headroom.invalid_argument, "empty key name"),
    (lambda: stats.Report([1, 2]), TypeError, "expected a headroom.stats.Report or a dict"),
    (lambda: stats.report({"a": 1})["b"], headroom.invalid_argument, 'no key "b"'),
    (lambda: stats.max_of([]), headroom.invalid_argument, "no reports"),
    (lambda: stats.max_of([{"a": 1}], nan="skip"), headroom.invalid_argument, "nan = 'skip'"),
    (lambda: stats.ReducePlan(-1), headroom.invalid_argument, "capacity = -1"),
    (lambda: stats.ReducePlan(2**25), headroom.invalid_argument, "exceeds the maximum"),
    (lambda: stats.unpack_max({"a": 1}, np.zeros(3, dtype=np.int64)), headroom.invalid_argument,
     "reduced words has 3 words; expected 31"),
    (lambda: stats.unpack_max({"a": 1}, [0] * 31), TypeError, "expected a 1-d contiguous int64"),
    (lambda: stats.unpack_max({"a": 1, "b": 2}, stats.pack_max({"a": 1, "b": 2}), stats.ReducePlan(1)),
     headroom.invalid_argument, "reduced words has 32 words; expected 31"),
    # a local report larger than the plan the words were made for: refused, never read past them
    (lambda: stats.unpack_max({"a": 1, "b": 2, "c": 3}, stats.pack_max({"a": 1}), stats.ReducePlan(1)),
     headroom.capacity_error, "this rank's report has 3 keys but the reduce_plan holds 1"),
    (lambda: stats.unpack_gather({"a": 1, "b": 2, "c": 3}, stats.pack_gather({"a": 1}), stats.ReducePlan(1)),
     headroom.capacity_error, "this rank's report has 3 keys but the reduce_plan holds 1"),
    # another report's words of the right size: refused, never reinterpreted
    (lambda: stats.unpack_max({"a": 1, "b": 2.0}, stats.pack_max({"x": 1, "y": 2}), None, 0, 1),
     headroom.collective_mismatch, "not the result of a reduction of this report"),
    (lambda: stats.unpack_max({"a": 1}, stats.pack_max({"a": 1}), None, 2, 2), headroom.invalid_argument,
     r"rank 2 of a group of 2; expected 0 <= rank < size"),
    (lambda: stats.unpack_gather({"a": 1}, stats.pack_gather({"a": 1}), None, -1, 1), headroom.invalid_argument,
     r"rank -1 of a group of 1"),
    (lambda: stats.unpack_max({"a": 1, "b": 2}, stats.pack_max({"a": 1, "b": 2}, 1), 1), headroom.capacity_error,
     "has 2 keys but the reduce_plan holds 1"),
    (lambda: stats.unpack_max({"a": 1}, stats.pack_max({"a": 1}, None, 5), None, 0, 2), headroom.invalid_argument,
     r"writer rank 5 out of range \[0, 2\)"),
    (lambda: stats.unpack_gather({"a": 1}, stats.pack_gather({"a": 1}), None, 0, 2), headroom.invalid_argument,
     "gathered words has 28 words; expected 56"),
])
def test_bad_input_names_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_reduce_plan_sizes():
    p = stats.ReducePlan(5)
    assert (p.capacity, p.max_words(), p.gather_words_per_rank(), p.gather_words(4)) == (5, 35, 32, 128)
    assert str(p).startswith("stats::reduce_plan{capacity 5 keys") and p == stats.ReducePlan(5)
    assert len(stats.pack_gather({"a": 1}, p)) == 32


def test_steady_state_writes_the_words_of_the_sorted_checked_report():
    """SteadyState (the torch adapter's fast path): a dict in the caller's order packed into the
    words pack_max / pack_gather write for the sorted CheckedReport, and read back typed."""
    values = {"z": 1.5, "a": -(2**63), "m": True, "b": math.nan, "y": -0.0, "c": 2**63 - 1, "x": -math.inf,
              "d": False, "e": 2**53 + 1}
    plan = stats.ReducePlan(len(values) + 3)
    st = stats.SteadyState.of(values, plan, 1, 3)
    ref = stats.pack_max(stats.CheckedReport(values, sort=True), plan, -1, "propagate", 1)
    words = st.pack_max(values)
    assert words is not None and (words == ref).all()
    gref = stats.pack_gather(stats.CheckedReport(values, sort=True), plan, -1, 1)
    assert (st.pack_gather(values) == gref).all()
    back = st.unpack_max(words)
    assert list(back) == list(values) and [type(v) for v in back.values()] == [type(v) for v in values.values()]
    assert math.isnan(back["b"]) and str(back["y"]) == "-0.0" and back["e"] == 2**53 + 1 and back["a"] == -(2**63)
    # another order, type, key set, an int past int64 or a bad value: None (the general path)
    for changed in (dict(reversed(list(values.items()))), dict(values, e=1.0), dict(values, m=1),
                    dict(values, e=2**63), dict(values, extra=1), {k: values[k] for k in list(values)[:-1]},
                    dict(values, e="1"), dict(values, e=np.int64(1))):
        assert st.pack_max(changed) is None
    # a header that is not this state's: a fault on another rank, another schema
    faulty = np.maximum(words, stats.pack_max(dict(values, e="x"), plan, -1, "propagate", 0))
    assert st.unpack_max(faulty) is None
    with pytest.raises(headroom.invalid_argument, match=r"rank 0 of 3 has a value that is not a statistic \(key 'e'"):
        stats.unpack_max(stats.CheckedReport(values, sort=True), faulty, plan, 1, 3)
    other = np.maximum(words, stats.pack_max(dict(values, m=1), plan))
    assert st.unpack_max(other) is None
    gathered = np.concatenate([st.pack_gather(dict(values, e=q)) for q in (5, 9, 9)])
    cols = dict(zip(st.keys, st.unpack_gather(gathered)))
    assert cols["e"] == ((5, 9, 9), 1, 0) and cols["m"] == ((True, True, True), 0, 0)
    assert st.unpack_gather(gathered[:-1]) is None
    # not a steady state: a tensor-like or numpy value, a bad value, too many keys for the plan
    assert stats.SteadyState.of(dict(values, e=np.float64(1)), plan, 0, 3) is None
    assert stats.SteadyState.of(dict(values, e="1"), plan, 0, 3) is None
    assert stats.SteadyState.of(values, stats.ReducePlan(2), 0, 3) is None


def test_a_bad_value_travels_with_the_data_and_every_rank_names_it():
    """A CheckedReport never raises for a value: its fault is in the words, and unpack raises
    invalid_argument naming the rank, key and value on every rank (the simulated collective)."""
    plan = stats.ReducePlan(4)
    ranks = [{"a": 1, "b": 2.0}, {"a": 2**64, "b": 2.0}, {"a": 3, "b": "x"}]
    checked = [stats.CheckedReport(r) for r in ranks]
    assert checked[0].fault is None
    assert checked[1].fault == "key 'a' = 18446744073709551616; expected an int that fits in int64"
    assert checked[2].fault == "key 'b' = 'x' (str); expected an int, float or bool"
    reduced = np.maximum.reduce([stats.pack_max(c, plan, -1, "propagate", q) for q, c in enumerate(checked)])
    for q in range(3):
        with pytest.raises(headroom.invalid_argument, match=r"rank 1 of 3 has .*key 'a' = 18446744073709551616"):
            stats.unpack_max(checked[q], reduced, plan, q, 3)
    gathered = np.concatenate([stats.pack_gather(c, plan, -1, q) for q, c in enumerate(checked)])
    for q in range(3):
        with pytest.raises(headroom.invalid_argument, match=r"rank 1 of 3"):
            stats.unpack_gather(checked[q], gathered, plan, q, 3)
    # through max_with: a dict is read as a CheckedReport
    with pytest.raises(headroom.invalid_argument, match=r"rank 2 of 3 .*key 'b' = 'x'"):
        stats.max_with(ranks[2], lambda w: np.maximum(w, stats.pack_max(ranks[0], plan)), rank=2, size=3, plan=plan)
    # bools stay bools, and bool vs int is part of the schema
    b = stats.CheckedReport({"x": True, "n": np.bool_(False), "f": np.float32(0.5)})
    assert b.kinds() == ["bool", "bool", "float"] and b.report == stats.report({"x": 1, "n": 0, "f": 0.5})
    assert b.typed(b.report) == {"x": True, "n": False, "f": 0.5}
    mixed = np.maximum(stats.pack_max({"c": True}, plan), stats.pack_max({"c": 2**60 + 3}, plan))
    with pytest.raises(headroom.collective_mismatch, match="differ in keys, order or element types"):
        stats.unpack_max({"c": True}, mixed, plan, 0, 2)
    with pytest.raises(headroom.collective_mismatch):
        stats.unpack_max({"c": 2**60 + 3}, mixed, plan, 1, 2)


class _Temporary:
    """Exports a fresh buffer through __dlpack__ each time: nothing else holds it."""

    def __init__(self, words):
        self.words = words

    def __dlpack__(self, stream=None, **kw):
        return self.words.copy().__dlpack__()

    def __dlpack_device__(self):
        return self.words.__dlpack_device__()


def test_a_long_key_in_utf8_is_cut_at_a_character_boundary():
    plan = stats.ReducePlan(2)
    key = "é" * 30  # 60 bytes: cut to fit the wire
    ranks = [{key: "x"}, {key: 1}]
    reduced = np.maximum.reduce([stats.pack_max(r, plan, -1, "propagate", q) for q, r in enumerate(ranks)])
    for q in range(2):
        with pytest.raises(headroom.invalid_argument, match="rank 0 of 2 has .*key 'ééé.*\\.\\.\\.' = 'x'"):
            stats.unpack_max(ranks[q], reduced, plan, q, 2)


def test_words_exported_as_temporaries_are_read_before_they_go():
    plan = stats.ReducePlan(4096)
    r = {f"k{i}": i for i in range(4096)}
    words = stats.pack_max(r, plan)
    assert stats.unpack_max(r, _Temporary(words), plan) == stats.report(r)
    gathered = stats.pack_gather(r, plan)
    assert stats.unpack_gather(r, _Temporary(gathered), plan)["k4095"].max == 4095


def test_a_value_whose_index_empties_the_dict_is_read_safely():
    d = {}

    class Evil:
        def __index__(self):
            d.clear()
            return 7

    d["a"] = Evil()
    d["b"] = Evil()
    assert stats.report(d) == stats.report({"a": 7, "b": 7}) or len(stats.report(d)) <= 2
    d2 = {"a": Evil()}
    assert stats.CheckedReport(d2).fault is None


def test_report_equality_with_anything():
    r = stats.report({"a": 1})
    assert (r == None) is False and (r != None) is True  # noqa: E711
    assert (r == 3) is False and r == stats.report({"a": 1})


def test_phase_peaks_keep_each_phases_highest_peak():
    p = stats.PhasePeaks()
    p.open("forward")
    assert p.open_phase == "forward"
    with pytest.raises(headroom.logic_error, match='phase "forward" is still open; phases do not nest'):
        p.open("inner")
    p.close({"allocated_bytes.all.peak": 10, "reserved_bytes.all.peak": 1.5, "num_ooms": 3})
    p.record("forward", {"allocated_bytes.all.peak": 7, "reserved_bytes.all.peak": 2.5})
    p.record("optimizer", {"allocated_bytes.all.peak": 4})
    assert p.report().as_dict() == {"forward/allocated_bytes.all.peak": 10, "forward/reserved_bytes.all.peak": 2.5,
                                    "optimizer/allocated_bytes.all.peak": 4}
    with pytest.raises(headroom.logic_error, match="no phase is open"):
        p.close({})
    p.clear()
    assert len(p.report()) == 0


LAYOUT = re.compile(
    r"\b\w*(?:word|reduced|gathered|header)\w*\s*\[[^\]]*\d"  # a numeric offset into wire words
    r"|2\s*\*\*\s*6[34]|<<\s*(?:40|6[34])|>>\s*(?:40|6[34])|iinfo\(np\.int64\)|view\(np\.float64\)"  # bit layouts
    r"|_KEY_(?:MAX|MIN)|\border_keys?\b|\bslots\b|\b(?:max|gather)_header\b")


def test_python_holds_no_wire_layout():
    """The stats wire (header words, fault block, slots, order keys) is the C++ reducer's:
    Python asks C++ (SteadyState, pack_* / unpack_*) and spells no offset or bit pattern."""
    root = pathlib.Path(headroom.__file__).resolve().parent
    sources = [root / "stats.py", root / "torch" / "stats.py"]
    found = [(f.name, n, line.strip()) for f in sources for n, line in enumerate(f.read_text().splitlines(), 1)
             if LAYOUT.search(line.split("#")[0])]
    assert not found, found
    assert LAYOUT.search("words[:6] = header") and LAYOUT.search("b >> 63")  # the check can fail
