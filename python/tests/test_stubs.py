# SPDX-License-Identifier: Apache-2.0
"""The wheel ships typed stubs for every submodule of headroom._core, next to the module."""
from pathlib import Path

import pytest

import headroom._core as core

STUBS = Path(core.__file__).parent / "_core"


def test_the_extension_is_the_module_and_stubs_sit_beside_it():
    assert Path(core.__file__).name.startswith("_core.") and not Path(core.__file__).name.endswith(".pyi")
    assert (STUBS.parent / "py.typed").exists()


@pytest.mark.parametrize("stub, names", [
    ("__init__.pyi", ["class invalid_argument(error, ValueError)", "from headroom._core import"]),
    ("pool/__init__.pyi", ["class Plan:", "def make_plan(", "def fingerprint(", "class HostUnitPool:",
                          "class LeaseTrace:", "class LifetimePlan:", "class LearningArena:", "def plan_lifetimes("]),
    ("pool/models.pyi", ["def make_workload(", "def record_fsdp_step(", "units: Sequence[Sequence[tuple[int, int]]]"]),
    ("cp.pyi", ["class Partition:", "def shifted_labels("]),
    ("pipeline/__init__.pyi", ["class Schedule:", "def predict_memory(", "def fingerprint(", "forward_only: bool",
                               "class Placement:", "placement: Placement | None = None", "backward_stage: int = -1",
                               "stage_bytes: StageBytes | Sequence[StageBytes] | Sequence[Sequence[StageBytes]]"]),
    ("pipeline/pytorch.pyi", ["def import_actions(", "def to_csv("]),
    ("stats/__init__.pyi", ["class Report:", "def max_of("]),
    ("trace.pyi", ["class Recorder:", "def to_memory_viz(", "def allocator_settings(self) -> dict", "def synthetic("]),
])
def test_stub_declares_the_api(stub, names):
    text = (STUBS / stub).read_text()
    for n in names:
        assert n in text, (stub, n)
