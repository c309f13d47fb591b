"""Queries run continuously while batches are staged and migrated (pushes, pulls, merges, releases
in another thread); every answer is checked against the ground truth at its watermark: no row
twice, none missing, each in its newest version. DuckDB warehouse here; the PostgreSQL run is in
``tests/integration/api``."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from api.exceptions import WatermarkNotReached, WatermarkUnavailable
from api.service import QueryService
from migration.migrator import Migrator
from tests.unit.api.harness import ShopStage, ask, check_answer, shop_service, shop_settings

TABLES = ("customers", "accounts", "prices", "activity")


def run_consistency(
    stage: ShopStage,
    service: QueryService,
    migrator: Migrator,
    *,
    batches: int,
    targets: list[str],
    readers: int = 3,
) -> Counter[str]:
    """Stage ``batches`` batches while a migration thread and ``readers`` query threads run;
    returns how many answers each plan gave (every one checked)."""
    done = threading.Event()
    errors: list[BaseException] = []
    checked: Counter[str] = Counter()
    lock = threading.Lock()

    def staging() -> None:
        try:
            for batch_id in range(1, batches + 1):
                stage.stage(batch_id)
                time.sleep(0.02)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def migrating() -> None:
        rng = random.Random(1)
        try:
            while not done.is_set():
                action = rng.choice(["push", "push", "merge", "pull", "rest"])
                names = [rng.choice(targets)]
                if action == "push":
                    migrator.migrate(names, via="push", merge="never")
                elif action == "merge":
                    migrator.migrate(names, via="push", merge="force")
                elif action == "pull":
                    migrator.migrate(names, via="pull", merge="force")
                time.sleep(rng.uniform(0.01, 0.05))
        except BaseException as exc:
            errors.append(exc)

    def querying(seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not done.is_set() or not checked:
                table = rng.choice(TABLES)
                target = rng.choice(targets)
                options: dict[str, Any] = {"target": target}
                kind = rng.choice(["island", "migrate", "auto", "warehouse", "pinned"])
                if kind == "warehouse":
                    options["include_staged"] = False
                elif kind == "pinned":
                    options["plan"] = "island"
                    options["watermark"] = max(0, stage.store.watermark - rng.randint(0, 3))
                else:
                    options["plan"] = kind
                try:
                    page = ask(service, table, **options)
                except (WatermarkUnavailable, WatermarkNotReached):
                    with lock:
                        checked["pin refused"] += 1
                    continue
                check_answer(stage, service, table, page)
                if kind == "pinned":
                    assert page["watermark"] == options["watermark"]
                with lock:
                    checked[page["plan"] if kind != "pinned" else "pinned"] += 1
        except BaseException as exc:
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=staging), threading.Thread(target=migrating)]
    threads += [threading.Thread(target=querying, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return checked


def test_answers_stay_exact_while_ingest_and_migration_run(tmp_path: Path) -> None:
    stage = ShopStage(tmp_path / "staging.duckdb", events=80)
    service, migrator = shop_service(stage, shop_settings(tmp_path, max_rows=1_000_000))
    try:
        checked = run_consistency(stage, service, migrator, batches=40, targets=["duckdb"])
    finally:
        service.close()
        migrator.close()
    answers = sum(n for plan, n in checked.items() if plan != "pin refused")
    assert answers >= 40, checked
    for plan in ("island", "migrate", "warehouse", "pinned"):
        assert checked[plan] > 0, f"no {plan} answer was checked: {checked}"
