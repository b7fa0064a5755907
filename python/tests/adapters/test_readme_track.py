# SPDX-License-Identifier: Apache-2.0
"""README's PyTorch track end to end from a fresh install: `pip install .` of this checkout into an
empty folder (offline: no build isolation, no dependencies fetched; scikit-build-core reuses its
build folder, so after tools/test's install this is a no-op rebuild), then readme_track.py with
only that install of headroom on the path: README's Python blocks, CP split / gather on 2 gloo
processes, and a torch pipeline running a headroom schedule from its compute-only CSV."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def test_readme_pytorch_track_from_a_fresh_install(tmp_path):
    for build_dep in ("scikit_build_core", "nanobind"):
        if importlib.util.find_spec(build_dep) is None:
            pytest.skip(f"{build_dep} is not installed: pip cannot build headroom offline here")
    site = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--no-build-isolation", "--no-deps", "--target", str(site), str(REPO)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    # the fresh install first; other folders on PYTHONPATH (a --target install of megatron-fsdp, say)
    # stay, those holding another headroom do not
    others = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and not (Path(p) / "headroom").exists()]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *others]))
    walk = subprocess.run([sys.executable, str(Path(__file__).with_name("readme_track.py")), str(REPO / "README.md"),
                           str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert walk.returncode == 0, walk.stdout[-3000:] + walk.stderr[-5000:]
    assert f"from {site / 'headroom'}" in walk.stdout, walk.stdout[:500]  # the fresh install, not another one
    assert "README python block 2: ran" in walk.stdout
    assert "a torch pipeline from a headroom schedule's CSV: ran" in walk.stdout
