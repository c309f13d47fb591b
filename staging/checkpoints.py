"""Checkpoints of staging: the engine's whole state as of one batch, where a reprocess starts.

A reprocess (:mod:`runtime.reprocess`) recomputes tables by replaying input; from the first
record of every partition it needs no starting state, but to recompute only the batches after
``B`` (``--from BATCH|TIME``), or a staging file seeded with a state that is not in Kafka (a
historical load), it needs the state as it was at that point and where the input stood then.
A checkpoint holds exactly that, beside the staging file::

    <staging file>.checkpoints/<watermark, 12 digits>/
        checkpoint.json     the watermark W, when batch W committed and when the checkpoint was
                            taken, the dataflow version, the Kafka log, whether the file was
                            seeded; the offsets, stream progress, merge state and sequences
        <table>.parquet     every state table as of W, in its image form, sorted by row id

:func:`take_checkpoint`, in this order:

1. Open a read transaction on a connection of its own (the segment files pinned): everything it
   reads is the file as of one committed batch ``W``, while the pipeline goes on committing.
2. If a checkpoint of ``W`` exists, return it.
3. Write the tables and ``checkpoint.json`` into ``<W>.tmp/``, each file fsynced.
4. Rename ``<W>.tmp`` to ``<W>`` and fsync the folder: the checkpoint appears whole or not at all.
5. Delete all but the newest ``keep`` checkpoints, never the seed's (watermark 0 of a seeded file).

A crash leaves at most a ``.tmp`` folder, which readers ignore and the next take removes.
``hook(point)`` (fault injection: :mod:`runtime.faults`) is called after step 3's tables
(``tables``), after its ``checkpoint.json`` (``written``) and after step 4 (``renamed``).
:class:`Checkpointer` takes them in the background of a running pipeline, every
``STAGING__CHECKPOINT_EVERY_S`` seconds once batches committed, and once more at stop when due;
:meth:`~staging.store.StagingStore.seed` takes the seed's.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.evolution.convert import convert_image
from etl_dataflows.evolution.shape import DataflowShape, describe_flow
from etl_dataflows.state import StateImage, image_schema
from staging.layout import STATE, SYSTEM, arrow_of, q, qualified
from streamdi.files import fsync_path

if TYPE_CHECKING:
    from staging.batch_commit import PartitionProgress, StreamPartition, StreamProgress
    from staging.store import StagingStore

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.json"
#: The checkpoint of the seeded state (watermark 0 of a seeded file): never pruned.
SEED_WATERMARK = 0


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint on disk (see the module docstring)."""

    path: Path
    watermark: int
    committed_at: datetime | None
    taken_at: datetime
    version: int
    kafka_log: str | None
    seeded: bool
    offsets: dict[tuple[str, int], int]
    streams: dict[str, StreamProgress]
    partitions: dict[StreamPartition, PartitionProgress]
    sequences: dict[str, int]
    shape: DataflowShape
    """The dataflow's shape when it was taken (its tables' layout)."""

    def image(self, flow: CompiledDataflow) -> StateImage:
        """The state as the checkpoint holds it, in ``flow``'s tables (converted when the
        dataflow changed since, as an upgrade converts them: :mod:`etl_dataflows.evolution`)."""
        image = StateImage(
            {
                name: pq.read_table(self.path / f"{name}.parquet")
                for name in self.shape.tables
                if (self.path / f"{name}.parquet").exists()
            },
            dict(self.sequences),
        )
        return convert_image(image, self.shape, flow)

    def describe(self) -> str:
        when = (
            ""
            if self.committed_at is None
            else f", committed {self.committed_at:%Y-%m-%d %H:%M:%S}"
        )
        return f"the checkpoint after batch {self.watermark}{when}"

    def to_json(self) -> dict[str, Any]:
        return {
            "watermark": self.watermark,
            "committed_at": None if self.committed_at is None else self.committed_at.isoformat(),
            "taken_at": self.taken_at.isoformat(),
            "version": self.version,
            "kafka_log": self.kafka_log,
            "seeded": self.seeded,
            "offsets": [[t, p, o] for (t, p), o in sorted(self.offsets.items())],
            "streams": {
                s: [p.last_batch, p.max_ts, p.events, p.last_pos]
                for s, p in sorted(self.streams.items())
            },
            "partitions": [
                [
                    s,
                    t,
                    p,
                    m.last_batch,
                    m.max_ts,
                    None if m.held is None else base64.b64encode(m.held).decode(),
                ]
                for (s, t, p), m in sorted(self.partitions.items())
            ],
            "sequences": dict(sorted(self.sequences.items())),
            "shape": self.shape.dumps(),
        }

    @classmethod
    def read(cls, path: Path) -> Checkpoint:
        from staging.batch_commit import PartitionProgress, StreamProgress

        data = json.loads((path / CHECKPOINT_FILE).read_text(encoding="utf-8"))
        return cls(
            path=path,
            watermark=int(data["watermark"]),
            committed_at=_time(data["committed_at"]),
            taken_at=datetime.fromisoformat(data["taken_at"]),
            version=int(data["version"]),
            kafka_log=data["kafka_log"],
            seeded=bool(data["seeded"]),
            offsets={(str(t), int(p)): int(o) for t, p, o in data["offsets"]},
            streams={
                str(s): StreamProgress(int(b), None if m is None else int(m), int(e), int(p))
                for s, (b, m, e, p) in data["streams"].items()
            },
            partitions={
                (str(s), str(t), int(p)): PartitionProgress(
                    int(b),
                    None if m is None else int(m),
                    None if h is None else base64.b64decode(h),
                )
                for s, t, p, b, m, h in data["partitions"]
            },
            sequences={str(n): int(v) for n, v in data["sequences"].items()},
            shape=DataflowShape.loads(data["shape"]),
        )


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def checkpoints_dir(staging_path: Path) -> Path:
    """Where the checkpoints of the staging file at ``staging_path`` live."""
    return Path(f"{staging_path}.checkpoints")


def list_checkpoints(staging_path: Path) -> list[Checkpoint]:
    """The complete checkpoints of a staging file, oldest first (folders being written, or
    that a crash left half written, are not among them)."""
    folder = checkpoints_dir(staging_path)
    if not folder.is_dir():
        return []
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and entry.name.isdigit() and (entry / CHECKPOINT_FILE).exists():
            found.append(Checkpoint.read(entry))
    return found


def take_checkpoint(
    store: StagingStore,
    *,
    keep: int | None = None,
    hook: Callable[[str], None] | None = None,
) -> Checkpoint:
    """A checkpoint of ``store`` at its last committed batch, per the module docstring; ``keep``:
    how many to keep (None: all); ``hook``: see the module docstring."""
    from staging.batch_commit import read_offsets, read_partitions, read_sequences, read_streams
    from staging.store import SEEDED

    folder = checkpoints_dir(store.path)
    folder.mkdir(parents=True, exist_ok=True)
    # 1.
    cursor = store.cursor()
    try:
        store.begin_read(cursor)
        row = cursor.execute(
            f"SELECT batch_id, committed_at FROM {qualified(SYSTEM, 'batches')} "
            "ORDER BY batch_id DESC LIMIT 1"
        ).fetchall()
        watermark = int(row[0][0]) if row else 0
        committed_at = row[0][1] if row else None
        final = folder / f"{watermark:012d}"
        # 2.
        if (final / CHECKPOINT_FILE).exists():
            cursor.execute("ROLLBACK")
            return Checkpoint.read(final)
        meta = dict(
            cursor.execute(f"SELECT key, value FROM {qualified(SYSTEM, 'meta')}").fetchall()
        )
        checkpoint = Checkpoint(
            path=final,
            watermark=watermark,
            committed_at=committed_at,
            taken_at=datetime.now(UTC).replace(tzinfo=None),
            version=store.version,
            kafka_log=meta.get("kafka_log"),
            seeded=SEEDED in meta,
            offsets=read_offsets(cursor),
            streams=read_streams(cursor),
            partitions=read_partitions(cursor),
            sequences=read_sequences(cursor),
            shape=store.history[-1].shape if store.history else describe_flow(store.flow),
        )
        # 3.
        staging_dir = folder / f"{watermark:012d}.tmp"
        shutil.rmtree(staging_dir, ignore_errors=True)
        staging_dir.mkdir()
        for name, table in store.flow.tables.items():
            order = ", ".join(q(c) for c in table.row_id())
            data = arrow_of(cursor.sql(f"SELECT * FROM {qualified(STATE, name)} ORDER BY {order}"))
            _write(staging_dir / f"{name}.parquet", data.cast(image_schema(table)))
        cursor.execute("ROLLBACK")
    finally:
        cursor.close()
    if hook is not None:
        hook("tables")
    text = json.dumps(checkpoint.to_json(), indent=1)
    with open(staging_dir / CHECKPOINT_FILE, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    if hook is not None:
        hook("written")
    # 4.
    os.replace(staging_dir, final)
    fsync_path(folder)
    logger.info("checkpoint taken path=%s watermark=%s", final, watermark)
    if hook is not None:
        hook("renamed")
    # 5.
    if keep is not None:
        prune(store.path, keep)
    return checkpoint


def prune(staging_path: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints (the seed's stays) and any ``.tmp`` folder
    of a take that did not finish."""
    folder = checkpoints_dir(staging_path)
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.name.endswith(".tmp"):
            shutil.rmtree(entry, ignore_errors=True)
    done = list_checkpoints(staging_path)
    for checkpoint in done[: max(0, len(done) - keep)]:
        if checkpoint.seeded and checkpoint.watermark == SEED_WATERMARK:
            continue
        shutil.rmtree(checkpoint.path, ignore_errors=True)


def _write(path: Path, table: pa.Table) -> None:
    with open(path, "wb") as handle:
        pq.write_table(table, handle)
        handle.flush()
        os.fsync(handle.fileno())


class Checkpointer:
    """Takes checkpoints of ``store`` on a thread of its own while a pipeline runs: after a commit
    (:meth:`notify`), when the last one is ``every_s`` old; :meth:`stop` takes one more when one
    is due. A failure is logged and tried again at the next commit: checkpoints never stop the
    pipeline."""

    def __init__(
        self,
        store: StagingStore,
        every_s: float,
        keep: int,
        *,
        hook: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.every_s = every_s
        self.keep = keep
        self.hook = hook
        self.taken: Checkpoint | None = None
        done = list_checkpoints(store.path)
        self._last_at = time.monotonic() if done else float("-inf")
        self._last_watermark = done[-1].watermark if done else 0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpointer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def notify(self) -> None:
        """A batch committed."""
        self._wake.set()

    def due(self) -> bool:
        return (
            self.store.watermark > self._last_watermark
            and time.monotonic() - self._last_at >= self.every_s
        )

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        self._take_if_due()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait()
            self._wake.clear()
            if not self._stopping.is_set():
                self._take_if_due()

    def _take_if_due(self) -> None:
        if not self.due():
            return
        try:
            self.taken = take_checkpoint(self.store, keep=self.keep, hook=self.hook)
        except Exception as exc:  # a checkpoint never stops the pipeline
            logger.warning("checkpoint failed path=%s: %s", self.store.path, exc)
            return
        self._last_at = time.monotonic()
        self._last_watermark = self.taken.watermark
