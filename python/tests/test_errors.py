# SPDX-License-Identifier: Apache-2.0
import re
from pathlib import Path

import pytest

import headroom


def test_version_is_the_headers_version():
    header = (Path(__file__).resolve().parents[2] / "include/headroom/version.hpp").read_text()
    expected = re.search(r'#define HEADROOM_VERSION_STRING "([^"]+)"', header).group(1)
    assert headroom.__version__ == expected
    assert ".".join(map(str, headroom.version_info)) == expected


@pytest.mark.parametrize(
    "name, builtin",
    [
        ("invalid_argument", ValueError),
        ("capacity_error", ValueError),
        ("logic_error", RuntimeError),
        ("collective_mismatch", RuntimeError),
        ("group_aborted", RuntimeError),
        ("cuda_error", RuntimeError),
        ("nccl_error", RuntimeError),
        ("mpi_error", RuntimeError),
    ],
)
def test_error_classes_subclass_error_and_a_builtin(name, builtin):
    cls = getattr(headroom, name)
    assert issubclass(cls, headroom.error)
    assert issubclass(cls, builtin)
    assert cls.__module__ == "headroom._core"
