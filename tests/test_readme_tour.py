"""The README's tour runs as written from a fresh clone (issue 23).

Every `axsim ...` command of the tour's bash block runs, in order, in one scratch folder
holding a copy of the repository's `examples/` (what a fresh clone has), through the
console entry point in this process (shell quoting and redirection as bash would do
them). Each must exit 0, except the two whose exit code is a verdict the tour explains
(`compare`: 3 beyond tolerance; `validate`: 1 when a case is outside its tolerance);
none may print a traceback. The Python API example runs too.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from simulator.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
VERDICT_CODES = {"compare": {0, 3}, "validate": {0, 1}}


def tour_commands() -> list[str]:
    """The tour block's commands: continuation lines joined, comments dropped."""
    section = README[README.index("## A short tour") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    text = block.group(1).replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(" ".join(shlex.quote(w) for w in words))
    return out


def test_the_tour_is_axsim_commands_only() -> None:
    commands = tour_commands()
    assert len(commands) >= 15
    assert all(c.startswith("axsim ") for c in commands), commands


def test_readme_tour_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    for command in tour_commands():
        words = shlex.split(command)[1:]
        redirect = words.index(">") if ">" in words else None
        target = words[redirect + 1] if redirect is not None else None
        words = words[:redirect] if redirect is not None else words
        code = main(words)
        out, err = capsys.readouterr()
        if target:
            Path(target).write_text(out)
        assert "Traceback" not in err, (command, err)
        assert code in VERDICT_CODES.get(words[0], {0}), (command, code, err[-2000:])
    assert (tmp_path / "sim" / "config.resolved.yaml").is_file()
    assert (tmp_path / "nic-sweep" / "rows.csv").is_file()
    assert (tmp_path / "cal.yaml").is_file()
    assert (tmp_path / "axsim.schema.json").stat().st_size > 1000


def test_readme_python_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code = re.search(r"```python\n(.*?)```", README, re.S)
    assert code is not None
    exec(compile(code.group(1), "README.md", "exec"), {})
    assert "grid" in capsys.readouterr().out
