"""docs/langchain.md: its example runs as written (so CI runs the documented example)."""
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "langchain.md"


def python_blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_documented_example_runs(tmp_path, monkeypatch):
    blocks = python_blocks(DOC)
    assert blocks, f"no python example in {DOC}"
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})
    assert (tmp_path / "kb" / "MANIFEST").exists()
