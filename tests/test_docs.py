"""The user guide's runnable examples run (docs/guide/*.md).

A fenced ```bash or ```python block whose first line is `# doctest` is runnable. Each
page's runnable blocks run in order in one scratch directory (so later blocks see the
files earlier ones wrote), where `tests/data` links to the repository's fixtures; bash
blocks with `bash -euo pipefail`, python blocks with this interpreter. Other blocks are
full-size examples and are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide"
FENCE = re.compile(r"^( *)```(bash|python)\n(.*?)^\1```", re.S | re.M)
MARKER = "# doctest"
PAGES = ("simulate", "search", "sweep", "calibrate", "figures", "machines", "models")


def runnable_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every block marked runnable, indentation removed."""
    out = []
    for m in FENCE.finditer(text):
        indent, lang, body = m.group(1), m.group(2), m.group(3)
        lines = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in body.splitlines()]
        if lines and lines[0].strip().startswith(MARKER):
            out.append((lang, "\n".join(lines) + "\n"))
    return out


def test_every_page_exists_and_has_runnable_examples() -> None:
    for page in PAGES:
        text = (GUIDE / f"{page}.md").read_text()
        assert runnable_blocks(text), f"{page}.md has no runnable example"


def test_marker_parsing() -> None:
    text = "```bash\n# doctest\necho hi\n```\n\n```python\nprint(1)\n```\n   ```bash\n   # doctest\n   ls\n   ```\n"
    assert runnable_blocks(text) == [("bash", "# doctest\necho hi\n"), ("bash", "# doctest\nls\n")]


@pytest.mark.parametrize("page", PAGES)
def test_guide_examples_run(page: str, tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    for i, (lang, code) in enumerate(runnable_blocks((GUIDE / f"{page}.md").read_text())):
        cmd = (
            ["bash", "-euo", "pipefail", "-c", code]
            if lang == "bash"
            else [sys.executable, "-c", code]
        )
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, (
            f"{page}.md block {i + 1} ({lang}) failed with {proc.returncode}:\n{code}\n"
            f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
        )
