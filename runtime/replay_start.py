"""Where a reprocess's replay starts (``--from start|BATCH|TIME``), and its shadow set up there.

:func:`resolve_start` turns the option into a :class:`ReplayStart`: the state the shadow starts
from and so where in the input it replays from.

* ``start`` (the default): the first record of every partition, from an empty state; for a
  staging file seeded with a starting state (a historical load), the seed's checkpoint instead,
  since that state is not in Kafka.
* ``BATCH`` (a batch id ``B``): recompute batches ``B`` on, so start from the newest checkpoint
  at or before batch ``B - 1`` (:mod:`staging.checkpoints`); an earlier checkpoint than ``B - 1``
  recomputes a few batches more, and the report says which it took.
* ``TIME`` (ISO 8601, UTC when no zone is given): the newest checkpoint of a batch committed at
  or before it.

:func:`prepare_shadow` opens the shadow's staging file at that start: a shadow started elsewhere
(or half set up by a crash) is discarded; a new one starting at a checkpoint is seeded with its
state, then one batch of no events sets the checkpoint's offsets, stream progress, merge state and
sequences (the shadow pipeline resumes from there like a pipeline after a restart), and last its
id and start are noted in its meta, which marks the shadow as complete.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from etl_dataflows.dataflow import CompiledDataflow
from runtime.exceptions import RunError
from staging.batch_commit import BatchCommit
from staging.checkpoints import Checkpoint, list_checkpoints
from staging.exceptions import StagingMismatch
from staging.store import StagingStore
from streamdi.errors import TerminalError

logger = logging.getLogger(__name__)

#: The shadow's ``streamdi.meta`` key naming its start; set last.
START_META = "reprocess_from"
#: The shadow's ``streamdi.meta`` key holding its id.
SHADOW_ID_META = "shadow_id"


class ReprocessRefused(RunError, TerminalError):
    """A reprocess request that cannot be served; the message says why and what to do."""


@dataclass(frozen=True)
class ReplayStart:
    """A replay's start: ``checkpoint`` (None: the first records, from an empty state)."""

    checkpoint: Checkpoint | None

    @property
    def label(self) -> str:
        return "start" if self.checkpoint is None else f"checkpoint:{self.checkpoint.watermark}"

    def describe(self) -> str:
        if self.checkpoint is None:
            return "the first record of every partition"
        return self.checkpoint.describe()


def resolve_start(staging_path: Path, text: str = "start") -> ReplayStart:
    """The start ``text`` names, per the module docstring; :class:`ReprocessRefused` when no
    checkpoint serves it."""
    checkpoints = list_checkpoints(staging_path)
    seed = next((c for c in checkpoints if c.seeded and c.watermark == 0), None)
    if text == "start":
        return ReplayStart(seed)
    if text.isdigit():
        batch = int(text)
        if batch < 1:
            raise ReprocessRefused(f"--from {text}: batch ids start at 1")
        if batch == 1:
            return ReplayStart(seed)
        usable = [c for c in checkpoints if c.watermark <= batch - 1]
        wanted = f"at or before batch {batch - 1}"
    else:
        moment = _parse_time(text)
        usable = [c for c in checkpoints if c.committed_at is None or c.committed_at <= moment]
        wanted = f"of a batch committed at or before {moment:%Y-%m-%d %H:%M:%S} UTC"
    if usable:
        return ReplayStart(usable[-1])
    have = ", ".join(f"after batch {c.watermark}" for c in checkpoints) or "none"
    raise ReprocessRefused(
        f"--from {text}: no checkpoint {wanted} (checkpoints kept: {have}); a running pipeline "
        "takes them every STAGING__CHECKPOINT_EVERY_S and keeps STAGING__CHECKPOINTS_KEEP; "
        "--from start replays every record Kafka holds"
    )


def _parse_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ReprocessRefused(
            f"--from {text!r}: expected start, a batch id or an ISO 8601 time (2026-11-24T10:00:00)"
        ) from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def prepare_shadow(
    path: Path, flow: CompiledDataflow, start: ReplayStart, variant: str = ""
) -> tuple[str, bool]:
    """The shadow's staging file at ``path`` set up at ``start`` (``variant``: how its input is
    read, part of what must match), per the module docstring: its id (names its own topics) and
    whether it was made new."""
    label = start.label + variant
    if path.exists():
        try:
            with StagingStore(path, flow, background_merge=False) as store:
                shadow_id = store.meta(SHADOW_ID_META)
                if store.meta(START_META) == label and shadow_id is not None:
                    return shadow_id, False
        except StagingMismatch:
            pass  # a shadow of another version of the dataflow
    if path.parent.exists():
        logger.warning("reprocess discards a shadow started elsewhere at %s", path)
        shutil.rmtree(path.parent)
    shadow_id = uuid.uuid4().hex[:12]
    with StagingStore(path, flow, background_merge=False) as store:
        checkpoint = start.checkpoint
        if checkpoint is not None:
            image = checkpoint.image(flow)
            store.seed(image, checkpoint=False)
            # batch 1: no events, the checkpoint's progress
            store.commit(
                [
                    BatchCommit.without_events(
                        1,
                        sequences=checkpoint.sequences,
                        offsets=checkpoint.offsets,
                        streams=checkpoint.streams,
                        partitions=checkpoint.partitions,
                    )
                ]
            )
        store.set_meta(SHADOW_ID_META, shadow_id)
        store.set_meta(START_META, label)
    return shadow_id, True
