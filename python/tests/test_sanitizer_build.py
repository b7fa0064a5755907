# SPDX-License-Identifier: Apache-2.0
"""The sanitizer build of the extension modules (.ci/run's "Python extensions under ASan + UBSan"
section) is able to fail: headroom._core built with -DHEADROOM_PYTHON_SANITIZER_SELF_TEST has a
planted read of freed memory, and AddressSanitizer must stop the process on it, naming it.

Skipped in every other build (the binding does not exist there); HEADROOM_REQUIRE_SANITIZER_BUILD=1
(set by that CI section) turns the skip into a failure, so the section cannot pass without it.
"""
import os
import subprocess
import sys

import pytest

from headroom import _core


def test_asan_reports_the_planted_use_after_free():
    if not hasattr(_core, "_planted_use_after_free"):
        if os.environ.get("HEADROOM_REQUIRE_SANITIZER_BUILD") == "1":
            pytest.fail("HEADROOM_REQUIRE_SANITIZER_BUILD=1 but headroom._core has no planted use-after-free: "
                        "it was not built with -DHEADROOM_PYTHON_SANITIZER_SELF_TEST")
        pytest.skip("not the sanitizer build of headroom._core")
    r = subprocess.run([sys.executable, "-c", "from headroom import _core; _core._planted_use_after_free()"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, f"the planted use-after-free ran to the end unreported:\n{r.stderr[-2000:]}"
    assert "ERROR: AddressSanitizer: heap-use-after-free" in r.stderr, r.stderr[-3000:]
    # The frame is the planted binding: its source line (symbolized) or at least the module.
    assert "src/core/module.cpp" in r.stderr or "_core." in r.stderr, r.stderr[-3000:]
