# SPDX-License-Identifier: Apache-2.0
"""Every ```python block of README.md and docs/*.md runs as written.

A block runs alone (a fresh namespace, a scratch working directory), so each one is complete. The
line before a block may say what it needs: ``<!-- test: gpu -->`` (CUDA; such blocks carry the
pytest marker ``gpu``, so ``pytest -m gpu python/tests/test_docs.py`` runs them alone, as
tools/gpu-check can) or ``<!-- test: needs megatron_fsdp -->`` (an importable module); where that is
missing the block is skipped, saying why. Every block, skipped or not, must at least compile.
"""
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
BLOCK = re.compile(r"(?:<!-- test: ([^>]*?) -->\n)?```python\n(.*?)^```", re.S | re.M)


def _blocks():
    found = []
    for doc in DOCS:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start(2)) + 1
            tags = (m.group(1) or "").split(",")
            found.append((f"{doc.relative_to(REPO)}:{line}", [t.strip() for t in tags if t.strip()], m.group(2)))
    return found


BLOCKS = _blocks()


def _needs(tags):
    """The reason to skip, or None."""
    for tag in tags:
        if tag == "gpu":
            torch = pytest.importorskip("torch", reason="torch is not installed (a GPU block)")
            if not torch.cuda.is_available():
                return "needs a CUDA device"
        elif tag.startswith("needs "):
            for module in tag[len("needs "):].split():
                if importlib.util.find_spec(module) is None:
                    return f"needs {module}, which is not installed"
        else:
            raise AssertionError(f"unknown test tag {tag!r}; expected 'gpu' or 'needs <module>'")
    return None


def test_the_docs_have_python_blocks():
    where = {name.split(":")[0] for name, _, _ in BLOCKS}
    assert {"README.md", "docs/python.md", "docs/cp.md", "docs/torch.md", "docs/lifetime.md", "docs/trace.md"} <= where, where


@pytest.mark.parametrize("name, tags, code", [
    pytest.param(*b, id=b[0], marks=[pytest.mark.gpu] if "gpu" in b[1] else []) for b in BLOCKS])
def test_block_runs(name, tags, code, tmp_path, monkeypatch):
    compiled = compile(code, name, "exec")  # a syntax error fails even where the block is skipped
    reason = _needs(tags)
    if reason is None and "torch" in code and importlib.util.find_spec("torch") is None:
        reason = "needs torch, which is not installed"
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    try:
        exec(compiled, {"__name__": "__doc_block__"})
    finally:
        _undo_global_state()


def _undo_global_state():
    """What a block may leave installed in this process: Megatron-FSDP's allocator classes."""
    import sys

    hm = sys.modules.get("headroom.torch.megatron_fsdp")
    if hm is not None and hm.installed() is not None:
        hm.uninstall()
