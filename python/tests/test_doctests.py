# SPDX-License-Identifier: Apache-2.0
import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["headroom.pool", "headroom.cp", "headroom.pipeline", "headroom.stats", "headroom.trace"])
def test_module_examples_run(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
