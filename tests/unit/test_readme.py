"""The README's dataflow example runs and does what its comments say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_dataflow_example_runs(capsys: Any) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "README.md has no python example"
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    run = namespace["run"]
    aborts = run.sink.abort_rows()
    assert [(a["pos"], a["reason"]) for a in aborts] == [
        (0, "op0 update accounts: no row for key [1]")
    ]
    dead = run.sink.dead_letter_rows()
    assert [(d["pos"], d["reason"]) for d in dead] == [(1, "amount must be positive")]
    assert "amount must be positive" in capsys.readouterr().out
