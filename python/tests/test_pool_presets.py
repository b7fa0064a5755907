# SPDX-License-Identifier: Apache-2.0
"""A plan made in Python for every model preset equals the plan a C++ program makes with the
headers alone: fingerprint, arena bytes, every bucket's offsets and the printed plan."""
import json
import subprocess

import pytest

from headroom import pool

# The planner settings of python/tests/cpp/plan_dump.cpp, by the key suffix it prints.
SETTINGS = {
    "max": lambda w: pool.plan(w, "max"),
    "fixed": lambda w: pool.plan(w, "fixed"),
    "max-bytes-3-512": lambda w: pool.plan(w, "max", category="by_bytes", buffers=3, alignment=512),
    "max-pad64": lambda w: pool.plan(w, "max", padding=pool.pad_elements(64)),
    "fixed-bytes-align4096": lambda w: pool.plan(w, "fixed", category="by_bytes", padding=pool.align_bytes(4096)),
    "interval-2": lambda w: pool.plan(w, "interval", orders=[pool.training_order(w), pool.evaluation_order(w)]),
    "interval-3-pad8": lambda w: pool.plan(w, "interval", orders=[pool.training_order(w)], resident=3,
                                           padding=pool.pad_elements(8)),
}
VARIANTS = {"bf16": {}, "fp8": {"fp8_params": True}, "grads-f32": {"grad_dtype": "float32"}}


@pytest.fixture(scope="module")
def cpp_plans(cxx_program):
    out = subprocess.run([str(cxx_program("plan_dump"))], capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_every_preset_and_setting_is_dumped(cpp_plans):
    keys = [p["key"] for p in cpp_plans]
    assert len(keys) == len(set(keys))
    expected = {f"{m}|{ep}|{v}|{s}" for m, ep in pool.models.all_cases() for v in VARIANTS for s in SETTINGS}
    assert set(keys) == expected
    assert {m for m, _ in pool.models.all_cases()} == set(pool.models.names())


def test_python_plans_equal_the_cpp_plans(cpp_plans):
    workloads = {}
    for cpp in cpp_plans:
        model, ep, variant, setting = cpp["key"].split("|")
        w = workloads.get((model, ep, variant))
        if w is None:
            w = workloads[(model, ep, variant)] = pool.model_workload(model, int(ep), **VARIANTS[variant])
        p = SETTINGS[setting](w)
        d = pool.as_dict(p)
        offsets = [u["bucket_offsets"] for u in d["units"]]
        assert (p.fingerprint, p.arena_bytes) == (cpp["fingerprint"], cpp["arena_bytes"]), cpp["key"]
        assert offsets == cpp["offsets"], cpp["key"]
        assert str(p) + p.describe_units() == cpp["text"], cpp["key"]


def test_a_workload_rebuilt_from_python_data_plans_the_same(cpp_plans):
    # The preset as plain lists and dicts (what an engine would hand over), planned again.
    by_key = {p["key"]: p for p in cpp_plans}
    for model, ep in pool.models.all_cases():
        w = pool.model_workload(model, ep, fp8_params=True)
        data = json.loads(json.dumps(pool.as_dict(w)))
        rebuilt = pool.workload(data)
        assert rebuilt == w
        for setting in ("max", "interval-2"):
            p = SETTINGS[setting](rebuilt)
            assert p.fingerprint == by_key[f"{model}|{ep}|fp8|{setting}"]["fingerprint"]
