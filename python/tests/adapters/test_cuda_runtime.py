# SPDX-License-Identifier: Apache-2.0
"""One CUDA runtime per process: headroom._cuda and headroom._torch_ops launch their kernels through
the libcudart torch loaded (linked shared), not through a private static copy each (its own fatbin
registry, current device, lazy initialisation and exit-time teardown beside torch's). Needs no GPU:
it looks at what the modules load, in fresh processes. Skipped where headroom._cuda is not built."""
import subprocess
import sys

import pytest

pytest.importorskip("headroom._cuda", reason="headroom was built without nvcc: no CUDA module")

# Every CUDA runtime opens the driver by this name itself: a module that carries the string carries
# a runtime of its own.
DRIVER = b"libcuda.so.1"

MAPPED = (
    "def runtimes():\n"
    "    with open('/proc/self/maps') as f:\n"
    "        return sorted({l.split()[-1] for l in f if '/libcudart.so' in l})\n"
)


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", MAPPED + code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


def test_cuda_module_loads_the_shared_runtime_without_torch():
    # torch blocked: the module imports and brings the shared libcudart with it (nothing else would).
    got = run("import sys; sys.modules['torch'] = None\n"
              "import headroom._cuda as m\n"
              "print(len(runtimes()), m.__file__)")
    count, path = got.split(" ", 1)
    assert count == "1", f"{path} mapped {count} libcudart files, expected its one shared runtime"


def test_modules_share_torchs_runtime():
    torch = pytest.importorskip("torch")
    if torch.version.cuda is None:
        pytest.skip("a CPU-only torch loads no CUDA runtime to share")
    got = run("import torch\n"
              "import headroom.torch._cp_ops as ops\n"
              "from headroom import _cuda\n"
              "mods = [_cuda.__file__] + ([ops._torch_ops.__file__] if ops._torch_ops is not None else [])\n"
              "print(len(runtimes()), *mods)")
    count, *modules = got.split(" ")
    assert count == "1", f"{count} libcudart files mapped after torch and headroom's modules, expected torch's one"
    for path in modules:
        with open(path, "rb") as f:
            own_runtime = DRIVER in f.read()
        # _torch_ops built without CUDA kernels links no runtime at all: the check holds as well.
        assert not own_runtime, f"{path} carries a CUDA runtime of its own (a static libcudart)"
