# SPDX-License-Identifier: Apache-2.0
"""Each extension module exports its PyInit_<name> and nothing else (cmake/headroom_python_runtime.cmake).

A module built by a compiler that links libstdc++ statically (the GPU image's CXX=/opt/gcc/bin/g++)
exported that copy's functions, and the dynamic linker bound half of the module's C++ runtime to the
system libstdc++.so.6 that torch had loaded: every number formatted into an ostream crashed (run X in
docs/BENCHMARKS.md). With a shared libstdc++ the same modules still exported ~480 std:: template
instantiations for other libraries to interpose. The check reads each module's dynamic symbol table
(nm -D) as built here, whatever the compiler."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import headroom

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF symbol tables: Linux only"),
    pytest.mark.skipif(shutil.which("nm") is None, reason="no nm (binutils) to read the symbol tables"),
]

MODULES = sorted(p for p in Path(headroom.__file__).parent.glob("_*.so"))


def exported(path: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # nm itself runs bare under the ASan pass
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True, env=env)
    return [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]


def test_the_core_module_is_there():
    assert any(p.name.startswith("_core.") for p in MODULES), f"no _core module in {Path(headroom.__file__).parent}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name.split(".")[0])
def test_module_exports_only_its_init(path):
    name = path.name.split(".")[0]
    symbols = exported(path)
    extra = [s for s in symbols if s != f"PyInit_{name}"]
    assert f"PyInit_{name}" in symbols, f"{path.name} does not export PyInit_{name}: {symbols[:10]}"
    assert not extra, (f"{path.name} exports {len(extra)} symbols besides PyInit_{name}, e.g. {extra[:8]}: "
                       "headroom_python_export_init_only() is missing from its target")
