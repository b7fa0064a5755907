# Every test under python/tests/torch needs torch: skip the folder, saying why, where it is missing.
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the adapters' tests need it")
