# SPDX-License-Identifier: Apache-2.0
# Every test under python/tests/adapters needs torch: skip the folder, saying why, where it is missing.
# (Not named `torch`: pytest puts python/tests on sys.path, and a folder of that name would then be
# imported as an empty `torch` namespace package wherever PyTorch is not installed.)
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the adapters' tests need it")
