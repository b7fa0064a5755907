# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: C++ programs under python/tests/cpp/, built from the same headers as the
package, so tests can compare what Python computes with what a C++ engine computes."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _compiler():
    for c in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if c and shutil.which(c):
            return c
    return None


@pytest.fixture(scope="session")
def cxx_program(tmp_path_factory):
    """cxx_program("plan_dump") -> path of python/tests/cpp/plan_dump.cpp built with -std=c++20.

    HEADROOM_TEST_CXX_DIR may name a folder holding the programs prebuilt; else the first of
    $CXX, c++, g++, clang++ builds them (skipped only when there is no compiler at all).
    """
    built = {}
    out_dir = tmp_path_factory.mktemp("cxx")

    def build(name):
        if name in built:
            return built[name]
        prebuilt = os.environ.get("HEADROOM_TEST_CXX_DIR")
        if prebuilt and (Path(prebuilt) / name).exists():
            built[name] = Path(prebuilt) / name
            return built[name]
        cxx = _compiler()
        if cxx is None:
            pytest.skip("no C++ compiler to build the C++ side of this comparison")
        exe = out_dir / name
        cmd = [cxx, "-std=c++20", "-O1", "-I", str(REPO / "include"), str(REPO / "python/tests/cpp" / f"{name}.cpp"),
               "-o", str(exe)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stderr[-4000:]}"
        built[name] = exe
        return exe

    return build


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one); tools/gpu-check runs them")
