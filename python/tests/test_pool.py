# SPDX-License-Identifier: Apache-2.0
import json

import numpy as np
import pytest

import headroom
from headroom import pool


def abc():
    # docs/pool.md's worked example: A = {bf16: 100, 10; fp8: 500}, B = {bf16: 60, 60, 5}, C = {bf16: 120}.
    return pool.workload("ABC", [
        {"name": "A", "buckets": [("bf16", 100), ("bf16", 10), ("fp8", 500)]},
        {"name": "B", "buckets": [("bfloat16", 60), {"dtype": "bf16", "elements": 60}, ("bf16", 5)]},
        pool.unit("C", [pool.bucket("bf16", 120)]),
    ])


def uniform(n, elements=8):
    return pool.workload("uniform", [[("bf16", elements)] for _ in range(n)])


def test_workload_from_lists_dicts_and_objects():
    w = abc()
    assert [u.name for u in w.units] == ["A", "B", "C"]
    assert [(b.dtype, b.elements, b.bytes) for b in w.units[0].buckets] == [
        ("bfloat16", 100, 200), ("bfloat16", 10, 20), ("uint8", 500, 500)]
    assert w.unit_bytes() == 200 + 20 + 500 + 120 + 120 + 10 + 240
    assert pool.workload(json.loads(json.dumps(pool.as_dict(w)))) == w
    assert pool.bucket("f32", bytes=12).elements == 3
    assert pool.bucket(np.dtype("float16"), np.int64(4)).bytes == 8
    assert pool.workload("x", [[("bf16", 1)]], non_unit=[("f32", 5)]).non_unit_bytes() == 20


def test_max_plan_of_the_worked_example():
    p = pool.plan(abc(), "max")
    shapes = [(s.category_name, s.bytes) for s in p.shapes]
    assert shapes == [("bfloat16", 240), ("bfloat16", 120), ("bfloat16", 10), ("uint8", 500)]
    assert p.buffers == 2 and len(p.slots) == 8
    # Group-major layout, every slot aligned to 256: group 0 at 0, 256, 512, 768; group 1 after.
    assert [s.offset for s in p.slots] == [0, 256, 512, 768, 1280, 1536, 1792, 2048]
    assert p.arena_bytes == 2560
    # B's two equal buckets: the later one sorts first (Megatron's order), so it takes slot 0.
    assert p.bucket_shape[1] == [1, 0, 2]
    assert p.bucket_offsets(1, 0) == [256, 1536]
    d = pool.as_dict(p)
    assert d["units"][2]["bucket_offsets"] == [[0, 1280]]
    assert d["fingerprint"] == p.fingerprint == pool.fingerprint(p)


def test_fixed_plan_pools_only_the_most_common_unit_shape():
    w = pool.workload("mixed", [[("bf16", 8)], [("bf16", 8)], [("bf16", 16)]])
    p = pool.plan(w, "fixed")
    assert p.pooled == [True, True, False]
    assert p.chosen_class() == [0, 1]
    assert p.representative_unit == 0
    assert p.bucket_shape[2] == [None]
    assert p.bucket_offsets(2, 0) == []
    assert p.fallback_bytes() == 32


def test_by_bytes_and_padding_and_alignment():
    w = pool.workload("t", [[("bf16", 100), ("fp8", 300)], [("fp8", 300), ("bf16", 100)]])
    assert len(pool.plan(w, "max").shapes) == 2
    assert [s.category_name for s in pool.plan(w, "max", category="by_bytes").shapes] == ["bytes", "bytes"]
    p = pool.plan(w, "max", padding=pool.pad_elements(64), alignment=1024, buffers=3)
    assert p.padding == "pad elements to x64"
    assert p.bucket_bytes[0] == [256, 320]
    assert all(s.offset % 1024 == 0 for s in p.slots) and len(p.slots) == 6
    q = pool.plan(w, "max", padding=pool.align_bytes(128))
    assert q.padding == "align bytes to 128" and q.bucket_bytes[0] == [256, 384]


def test_interval_plan_meets_the_lower_bound_and_validates_orders():
    w = pool.workload("t", [[("bf16", n)] for n in (100, 300, 200, 50)])
    orders = [pool.training_order(w), pool.evaluation_order(w)]
    p = pool.plan(w, "interval", orders=orders)
    assert p.planner == "interval" and p.resident == 2 and p.buffers == 1
    assert p.arena_bytes == pool.lower_bound(w, orders, 2)
    assert [o.name for o in p.orders] == ["train", "eval"]
    assert pool.find_conflict(p, pool.training_order(w)) is None
    pool.validate(p, pool.evaluation_order(w))
    # Units 0 and 2 are never neighbours in these orders, so they may share bytes; an order
    # that holds them together breaks the plan.
    sharing = pool.units_sharing_bytes(p)
    a = 0
    b = sharing[0][0]
    bad = pool.order("bad", [a, b])
    c = pool.find_conflict(p, bad)
    assert (c.first_unit, c.second_unit, c.position) == (a, b, 0)
    with pytest.raises(headroom.logic_error, match="share arena bytes"):
        pool.validate(p, bad)


def test_find_conflict_on_slot_plans_counts_buffers():
    w = uniform(4)
    p = pool.plan(w, "max", buffers=2)
    assert pool.find_conflict(p, pool.training_order(w), resident=2) is None
    c = pool.find_conflict(p, pool.training_order(w), resident=3)
    assert c is not None and "has 2 buffers" in c.message
    with pytest.raises(headroom.invalid_argument, match="resident units N = 0"):
        pool.find_conflict(p, pool.training_order(w))  # slot plans need N given


def test_host_unit_pool_acquire_release_and_can_acquire():
    w = uniform(3)
    hp = pool.HostUnitPool(pool.plan(w, "max"))
    a = hp.acquire(0)
    b = hp.acquire(1)
    assert {hp.offset(a, 0), hp.offset(b, 0)} == set(hp.plan.bucket_offsets(0, 0))
    assert hp.can_acquire([2]) is False
    assert hp.can_acquire([2], releasable=[0]) is True
    with pytest.raises(headroom.capacity_error):
        hp.acquire(2)
    hp.release(a)
    assert not a.valid
    with pytest.raises(headroom.logic_error):
        hp.release(a)
    c = hp.acquire(2)
    assert hp.stats["acquisitions"] == 3 and hp.stats["releases"] == 1
    assert hp.holders(2) == 1 and len(c) == 1 and c.kind == "unit" and c.index == 2
    assert "acquisitions 3" in hp.stats_text()
    with pytest.raises(headroom.invalid_argument, match="unit 7 out of range"):
        hp.acquire(7)


def test_printing_is_the_cpp_printer():
    p = pool.plan(abc(), "max")
    text = str(p)
    assert text.startswith("plan 'ABC': planner=max category=by_dtype padding=none buffers=2 alignment=256\n")
    assert "shape 3: uint8#0 500 B" in text
    assert "unit 1 'B':" in p.describe_units()
    assert repr(p).startswith("Plan('ABC', planner=max")
    assert repr(abc().units[0].buckets[2]) == "Bucket(uint8, bytes=500)"


def test_fingerprint_tells_plans_apart():
    w = abc()
    assert pool.plan(w).fingerprint == pool.plan(abc()).fingerprint
    assert pool.plan(w).fingerprint != pool.plan(w, buffers=3).fingerprint
    assert pool.plan(w) == pool.plan(abc()) and pool.plan(w) != pool.plan(w, "fixed")


def test_model_presets():
    names = pool.models.names()
    assert "Nemotron-H-8B" in names and len(names) == len(set(names))
    w = pool.model_workload("Nemotron-3-Nano-30B-A3B", 8, fp8_params=True)
    assert w.name == "Nemotron-3-Nano-30B-A3B EP8 fp8 bf16-ends"
    assert pool.models.pattern("Nemotron-H-4B").count("M") == len(
        [u for u in pool.model_workload("Nemotron-H-4B").units if "(M)" in u.name])
    assert pool.models.parameter_count("Nemotron-H-8B") > 7_000_000_000
    with pytest.raises(headroom.invalid_argument, match="no model 'GPT-5'; known: Nemotron-H-4B"):
        pool.model_workload("GPT-5")
    with pytest.raises(headroom.invalid_argument, match="expected a divisor of 128"):
        pool.model_workload("Nemotron-3-Nano-30B-A3B", 3)


@pytest.mark.parametrize("call, error, message", [
    (lambda: pool.bucket("bf16", -1), headroom.invalid_argument, "bucket elements = -1; expected a non-negative"),
    (lambda: pool.bucket("bf16", bytes=-5), headroom.invalid_argument, "bucket bytes = -5"),
    (lambda: pool.bucket("bf16", 1.5), TypeError, r"bucket elements = 1.5 \(float\); expected an integer"),
    (lambda: pool.bucket("bf16", True), TypeError, "bucket elements = True"),
    (lambda: pool.bucket("bf16", 2**70), headroom.invalid_argument, "does not fit in a signed 64-bit"),
    (lambda: pool.bucket("complex64", 4), headroom.invalid_argument, "dtype = 'complex64'; expected one of uint8"),
    (lambda: pool.bucket("bf16"), headroom.invalid_argument, "expected exactly one of elements and bytes"),
    (lambda: pool.bucket("f64", 2**62), headroom.capacity_error, "overflow 64-bit bytes"),
    (lambda: pool.plan(pool.workload("w", [])), headroom.invalid_argument, "has no units"),
    (lambda: pool.workload("w", [[]]).validate(), headroom.invalid_argument, "has no buckets"),
    (lambda: pool.plan(pool.workload("w", [[]])), headroom.invalid_argument, "has no buckets"),
    (lambda: pool.plan(pool.workload("w", [[("bf16", 0)]])), headroom.invalid_argument, "has 0 bytes"),
    (lambda: pool.workload("w", [[("bf16",)]]), TypeError, r"expected a Bucket, a \(dtype, elements"),
    (lambda: pool.workload("w", [{"buckets": [{"dtype": "bf16"}]}]), headroom.invalid_argument,
     "expected exactly one of elements and bytes"),
    (lambda: pool.workload("w", [{"buckets": [{"type": "bf16", "elements": 2}]}]), headroom.invalid_argument,
     "expected a dict with 'dtype'"),
    (lambda: pool.Workload("w", [1], []), TypeError, r"units\[0\] = 1; expected a Unit"),
    (lambda: pool.plan("w"), TypeError, "expected a headroom.pool.Workload"),
    (lambda: pool.plan(uniform(2), "greedy"), headroom.invalid_argument, "planner = 'greedy'; expected one of 'fixed'"),
    (lambda: pool.plan(uniform(2), category=3), TypeError, "category = 3; expected one of 'by_dtype'"),
    (lambda: pool.plan(uniform(2), buffers=1), headroom.invalid_argument, "buffers = 1; expected 2 <= buffers <= 64"),
    (lambda: pool.plan(uniform(2), buffers=65), headroom.invalid_argument, "buffers = 65"),
    (lambda: pool.plan(uniform(2), buffers=-2), headroom.invalid_argument, "buffers = -2"),
    (lambda: pool.plan(uniform(2), alignment=100), headroom.invalid_argument, "alignment = 100; expected a power"),
    (lambda: pool.plan(uniform(2), padding=64), TypeError, "padding = 64; expected None or a headroom.pool Padding"),
    (lambda: pool.pad_elements(0), headroom.invalid_argument, "multiple = 0"),
    (lambda: pool.align_bytes(3), headroom.invalid_argument, "align_bytes alignment = 3"),
    (lambda: pool.plan(pool.workload("w", [[pool.bucket("bf16", bytes=3)]]), padding=pool.pad_elements(2)),
     headroom.invalid_argument, "not a whole number of bfloat16 elements"),
    (lambda: pool.plan(uniform(3), "interval", orders=[pool.order("o", [0, 1])]), headroom.invalid_argument,
     "unit 2 is missing from every execution order"),
    (lambda: pool.plan(uniform(3), "interval", orders=[pool.order("o", [0, 5])]), headroom.invalid_argument,
     "names unit 5 at position 1; expected a unit index below 3"),
    (lambda: pool.plan(uniform(3), "interval", resident=1), headroom.invalid_argument, "resident units N = 1"),
    (lambda: pool.plan(uniform(3), "interval", orders=["train"]), TypeError, r"orders\[0\] = 'train'"),
    (lambda: pool.plan(uniform(3), "interval", buffers=3), headroom.invalid_argument, "give resident=N"),
    (lambda: pool.plan(uniform(3), "max", orders=[]), headroom.invalid_argument, "only 'interval' plans"),
    (lambda: pool.order("o", [0, -1]), headroom.invalid_argument, r"units\[1\] = -1"),
    (lambda: pool.order("o", "012"), TypeError, "expected a sequence of integers"),
    (lambda: pool.plan(uniform(2)).candidate_slots(0, 4), headroom.invalid_argument, "bucket 4 out of range"),
    (lambda: pool.plan(uniform(2)).bucket_offsets(-1, 0), headroom.invalid_argument, "unit = -1"),
    (lambda: pool.HostUnitPool(pool.plan(uniform(2))).can_acquire([0, 9]), headroom.invalid_argument,
     "unit 9 out of range"),
    (lambda: pool.model_workload("Nemotron-H-4B", grad_dtype="int4"), headroom.invalid_argument,
     "grad_dtype = 'int4'"),
    (lambda: pool.as_dict(3), TypeError, "as_dict: 3"),
])
def test_bad_input_names_the_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_errors_are_the_package_classes():
    with pytest.raises(ValueError):
        pool.plan(uniform(2), buffers=1)
    try:
        pool.plan(uniform(2), buffers=1)
    except headroom.error as e:
        assert type(e) is headroom.invalid_argument


def test_torch_dtypes_are_read_without_importing_torch_in_the_core():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    assert pool.bucket(torch.bfloat16, 4).dtype == "bfloat16"
    assert pool.bucket(torch.float8_e4m3fn, 4).dtype == "uint8"  # fp8 stored as bytes, as Megatron does
    assert pool.bucket(torch.int64, 2).bytes == 16
    with pytest.raises(headroom.invalid_argument, match="dtype = torch.complex64"):
        pool.bucket(torch.complex64, 1)


def test_leases_belong_to_their_pool():
    w = uniform(2)
    one, two = pool.HostUnitPool(pool.plan(w)), pool.HostUnitPool(pool.plan(w))
    lease = one.acquire(1)
    with pytest.raises(headroom.invalid_argument, match="belongs to another pool"):
        two.release(lease)
    one.release(lease)
    with pytest.raises(headroom.logic_error, match="lease is empty"):
        lease.index
    with pytest.raises(headroom.invalid_argument, match="non-unit bucket 0 out of range"):
        one.acquire_non_unit(0)  # uniform() has no non-unit buckets


def test_non_unit_buckets_live_outside_the_arena():
    w = pool.workload("w", [[("bf16", 8)], [("bf16", 8)]], non_unit=[("f32", 100)])
    hp = pool.HostUnitPool(pool.plan(w))
    n = hp.acquire_non_unit(0)
    assert (n.kind, n.index, len(n), n.nbytes(0)) == ("non_unit", 0, 1, 400)
    assert n.slot(0) is None and hp.offset(n, 0) is None
    assert hp.stats["fallback_bytes_in_use"] == 400
    hp.release(n)
    assert hp.stats["fallback_bytes_in_use"] == 0


def test_plan_sums_and_orders_validation():
    w = pool.workload("mixed", [[("bf16", 8)], [("bf16", 8)], [("bf16", 16)]], non_unit=[("f32", 3)])
    p = pool.plan(w, "fixed")
    assert (p.unit_count(), p.pooled_units()) == (3, 2)
    assert (p.unpooled_unit_bytes(), p.non_unit_total_bytes(), p.fallback_bytes()) == (32, 12, 44)
    assert p.group_bytes() == 16 and p.non_unit_bytes == [12]
    s = p.shapes[0]
    assert (s.category_name, s.ordinal, s.bytes, s.defining_unit, s.defining_bucket) == ("bfloat16", 0, 16, 0, 0)
    assert [(x.group, x.shape, x.offset, x.bytes) for x in p.slots] == [(0, 0, 0, 16), (1, 0, 256, 16)]
    pool.validate_orders(3, [pool.training_order(3)], 2)
    with pytest.raises(headroom.invalid_argument, match="unit 2 is missing from every execution order"):
        pool.validate_orders(3, pool.order("o", [0, 1]), 2)
    assert [c[0] for c in pool.models.reference_cases()][:2] == ["Nemotron-H-4B", "Nemotron-H-8B"]
    assert pool.evaluation_order(w).units == [0, 1, 2] and len(pool.training_order(w, "t")) == 6


def test_orders_past_2_to_the_32_units_are_refused():
    with pytest.raises(headroom.capacity_error, match="pool::training_order: 4611686018427387905 units, expected <= 4294967296"):
        pool.training_order(2**62 + 1)
    with pytest.raises(headroom.capacity_error, match="pool::evaluation_order"):
        pool.evaluation_order(2**40)
