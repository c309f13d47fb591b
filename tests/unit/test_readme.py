"""The README's dataflow examples run and do what their comments say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def run_block(first_line: str) -> dict[str, Any]:
    """Run the README's python block that starts with ``first_line``; its names."""
    found = [b for b in python_blocks() if b.startswith(first_line)]
    assert len(found) == 1, f"README.md has {len(found)} python blocks starting {first_line!r}"
    namespace: dict[str, Any] = {}
    exec(compile(found[0], "README.md", "exec"), namespace)
    return namespace


def test_readme_dataflow_example_runs(capsys: Any) -> None:
    blocks = python_blocks()
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


def test_readme_late_event_example() -> None:
    names = run_block("# late events: order is event time within a batch")
    assert names["together"].final_state.tables["wallets"].to_pylist() == [{"id": 1, "balance": 5}]
    assert names["apart"].final_state.tables["wallets"].to_pylist() == [{"id": 1, "balance": 10}]
    assert [a["reason"] for a in names["apart"].sink.abort_rows()] == [
        "op0 update wallets: insufficient funds"
    ]


def test_readme_second_step_example() -> None:
    names = run_block("# steps: a second transactional step sees the first step's writes")
    assert [r["left"] for r in names["same"].sink.rows("sales")] == [2]
    assert names["same"].sink.abort_rows() == []
    assert [(a["step"], a["reason"]) for a in names["later"].sink.abort_rows()] == [
        ("sell", "op0 update stock: out of stock")
    ]
