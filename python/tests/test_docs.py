"""The pool and pipeline tours of docs/python.md run as written."""
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs/python.md"


def blocks():
    text = DOC.read_text()
    return {m.group(1): m.group(2) for m in re.finditer(r"## (\w+):[^\n]*\n\n```python\n(.*?)```", text, re.S)}


@pytest.mark.parametrize("module", ["pool", "pipeline"])
def test_tour_runs(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the pipeline tour writes schedule.csv
    code = blocks()[module]
    exec(compile(code, f"docs/python.md ({module})", "exec"), {})
