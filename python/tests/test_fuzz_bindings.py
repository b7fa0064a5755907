# SPDX-License-Identifier: Apache-2.0
"""Property-based fuzzing of every function, constructor, method and property of headroom._core
and of headroom._cuda's launches (with no GPU visible they stop at their checks or at the CUDA
runtime; _core's Partition and Padding are among the drawn arguments): hypothesis draws batches of calls with extreme and
wrong-typed arguments (huge and negative ints, NaN, numpy bools and scalars, wrong dtypes,
non-contiguous and 0-d arrays, empty inputs, lone surrogates, objects exporting __dlpack__
temporaries, long containers), and each batch runs in a child process (fuzz_child.py), so a
segfault, an abort or a hang is a failed test naming the call, not a dead runner.

Every call must return or raise a headroom error, TypeError or MemoryError (the child runs under
a 4 GiB address-space limit, so a huge allocation is a MemoryError, not a swapping runner); a call
past 10 s counts as a hang (a size guard is missing). Separate cases cover objects used after
their owner is gone and calls from several threads at once.

Cost: about 20-40 s on 2 cores (HEADROOM_FUZZ_EXAMPLES batches of 120 calls per test, default 4).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CHILD = Path(__file__).with_name("fuzz_child.py")
EXAMPLES = int(os.environ.get("HEADROOM_FUZZ_EXAMPLES", "4"))
BATCH = 120
# Argument recipes, evaluated in the child (fuzz_child.VALUES names them); ints drawn freely too.
VALUE_NAMES = json.loads(subprocess.run([sys.executable, str(CHILD), "--values"], capture_output=True, text=True,
                                        check=True).stdout)


def _listing(module):
    r = subprocess.run([sys.executable, str(CHILD), "--list", "--module", module], capture_output=True, text=True)
    if r.returncode == 77:
        return None
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


CORE = _listing("headroom._core")
CUDA = _listing("headroom._cuda")

arg = st.one_of(st.sampled_from(VALUE_NAMES),
                st.integers(min_value=-(2**70), max_value=2**70).map(lambda i: f"int:{i}"),
                st.integers(min_value=0, max_value=16).map(lambda i: f"int:{i}"))


def calls(names):
    return st.tuples(st.sampled_from(names), st.lists(arg, max_size=5))


def run_batch(batch, *extra, timeout=300):
    """Runs the calls in one child; fails naming the call that crashed, hung or leaked an error."""
    # No GPU visible: _cuda's launches stop at the CUDA runtime instead of running on drawn pointers.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, str(CHILD), "--run", *extra], input=json.dumps(batch), capture_output=True,
                       text=True, timeout=timeout, env=env)
    started = [ln for ln in r.stdout.splitlines() if ln.startswith("call ")]
    last = started[-1] if started else "(before the first call)"
    assert r.returncode == 0, (f"fuzz child exited {r.returncode} (signal {-r.returncode if r.returncode < 0 else '-'}) "
                               f"during {last}\nstdout tail:\n{r.stdout[-3000:]}\nstderr tail:\n{r.stderr[-3000:]}")
    assert "BAD " not in r.stdout, "\n".join(ln for ln in r.stdout.splitlines() if ln.startswith("BAD "))


# No shrinking: a batch runs in a child (a second or so), and the failure already names the call.
FUZZ = settings(max_examples=EXAMPLES, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(st.lists(calls(CORE), min_size=BATCH, max_size=BATCH))
def test_core_calls_never_crash(batch):
    run_batch(batch)


@pytest.mark.skipif(CUDA is None, reason="headroom._cuda is not built (no nvcc at install)")
@FUZZ
@given(st.lists(calls(CUDA or ["-"]), min_size=BATCH // 2, max_size=BATCH // 2))
def test_cuda_calls_never_crash(batch):
    run_batch(batch, "--module", "headroom._cuda")


@FUZZ
@given(st.lists(calls(CORE), min_size=BATCH // 2, max_size=BATCH // 2))
def test_core_calls_from_four_threads(batch):
    run_batch(batch, "--threads", "4")


def test_objects_outliving_their_owners():
    run_batch([], "--lifetimes")


def test_the_child_catches_a_crash():
    """The harness can fail: a call that kills the child is reported, named."""
    with pytest.raises(AssertionError) as e:
        run_batch([["f:ctypes.string_at", ["int:8"]]])
    assert "during call 0 f:ctypes.string_at" in str(e.value)
    assert "(signal 11)" in str(e.value) or "AddressSanitizer: SEGV" in str(e.value)  # ASan's handler exits 1
