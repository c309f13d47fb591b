"""What every benchmark app shares: the common knobs and skewed key sampling."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, get_args

import numpy as np
import pyarrow as pa

from etl_dataflows.batch import EngineBatch
from etl_dataflows.dataflow import Dataflow
from etl_dataflows.state import StateImage
from etl_dataflows.types import POS, TS

KeyLayout = Literal["sequential", "random", "stride32", "stride40"]
#: How an app's key numbers ``0..keys-1`` become its int64 keys (:func:`key_values`).
KEY_LAYOUTS: tuple[KeyLayout, ...] = get_args(KeyLayout)


@dataclass(frozen=True)
class AppKnobs:
    """Knobs every app has (MorphStream Table 5 names in brackets).

    ``keys``: state records per table; ``theta``: Zipf skew of key access [θ]; ``abort_ratio``:
    share of transactions built to fail a condition [a]; ``batch_size``: transactions per batch
    [T]; ``batches``: how many; ``udf_cost_ns``: busy work per user function call [C];
    ``multi_partition_ratio``: share of multi-key transactions whose keys fall in different
    partitions (``partitions`` of them, by key modulo), the S-Store knob; ``seed``;
    ``key_layout``: the int64 keys the key numbers become (:func:`key_values`; the S-Store knob
    needs ``sequential``). App-specific knobs live in ``extra``.
    """

    keys: int = 10_000
    theta: float = 0.6
    abort_ratio: float = 0.01
    batch_size: int = 10_240
    batches: int = 10
    udf_cost_ns: int = 0
    multi_partition_ratio: float | None = None
    partitions: int = 2
    seed: int = 0
    key_layout: KeyLayout = "sequential"
    extra: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.keys < 2 or self.batch_size < 1 or self.batches < 1:
            raise ValueError("keys >= 2, batch_size >= 1 and batches >= 1 are required")
        if not 0.0 <= self.theta < 5.0:
            raise ValueError("theta must be within [0, 5)")
        for name in ("abort_ratio", "multi_partition_ratio"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")
        if self.udf_cost_ns < 0:
            raise ValueError("udf_cost_ns must be >= 0")
        if self.key_layout not in KEY_LAYOUTS:
            raise ValueError(f"key_layout must be one of {KEY_LAYOUTS}, not {self.key_layout!r}")
        if self.key_layout != "sequential" and self.multi_partition_ratio is not None:
            raise ValueError("multi_partition_ratio places keys by number: key_layout sequential")

    def knob(self, name: str, default: float) -> float:
        return float(self.extra.get(name, default))


@dataclass(frozen=True)
class App:
    """One benchmark application."""

    name: str
    title: str
    dataflow: Callable[[AppKnobs], Dataflow]
    initial_state: Callable[[AppKnobs], StateImage]
    batches: Callable[[AppKnobs], list[EngineBatch]]
    operations: Callable[[EngineBatch], int]
    defaults: dict[str, float]


def key_values(n: int, layout: KeyLayout = "sequential") -> np.ndarray:
    """The int64 keys of key numbers ``0..n-1``: ``sequential`` the numbers themselves,
    ``stride32`` and ``stride40`` the numbers times 2**32 and 2**40 (IDs with zero low bits, as
    some ID schemes make), ``random`` distinct keys spread over the int64 range (the same for every
    call with the same ``n``). Benchmarks compare the layouts: a key index that hashes well runs
    them all at the speed of ``random``."""
    return _key_values(n, layout).copy()


@lru_cache(maxsize=8)
def _key_values(n: int, layout: KeyLayout) -> np.ndarray:
    numbers = np.arange(n, dtype=np.int64)
    if layout == "sequential":
        return numbers
    if layout == "stride32":
        return numbers << np.int64(32)
    if layout == "stride40":
        if n > 2**23:
            raise ValueError("stride40 keys leave int64 beyond 2**23 keys")
        return numbers << np.int64(40)
    rng = np.random.default_rng(0x5EED)
    keys = np.unique(rng.integers(-(2**63), 2**63 - 1, size=n + 16, dtype=np.int64))
    while len(keys) < n:  # (practically never: 2**64 values)
        more = rng.integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64)
        keys = np.unique(np.concatenate([keys, more]))
    return rng.permutation(keys)[:n]


class ZipfKeys:
    """Keys drawn with P(rank r) ∝ 1/r**theta over ``n`` key numbers; ranks are shuffled over
    the numbers by seed, and numbers become keys by ``layout`` (:func:`key_values`)."""

    def __init__(
        self, n: int, theta: float, rng: np.random.Generator, layout: KeyLayout = "sequential"
    ) -> None:
        weights = 1.0 / np.power(np.arange(1, n + 1, dtype=np.float64), theta)
        self._cdf = np.cumsum(weights / weights.sum())
        self._cdf[-1] = 1.0
        self._keys = key_values(n, layout)[rng.permutation(n)]
        self._rng = rng
        self.n = n

    def draw(self, size: int) -> np.ndarray:
        ranks = np.searchsorted(self._cdf, self._rng.random(size), side="right")
        return self._keys[np.minimum(ranks, self.n - 1)]

    def draw_in_partition(self, partitions: np.ndarray, count: int) -> np.ndarray:
        """Keys drawn like :meth:`draw` but moved into the given partitions (key modulo count)."""
        keys = self.draw(len(partitions))
        moved = keys - (keys % count) + partitions
        result: np.ndarray = np.where(moved < self.n, moved, moved - count).astype(np.int64)
        return result


def event_table(
    columns: dict[str, np.ndarray | pa.Array], ts: np.ndarray, pos: np.ndarray
) -> pa.Table:
    """An events table from numpy columns plus ``_ts`` and ``_pos``."""
    arrays = {name: pa.array(values) for name, values in columns.items()}
    arrays[TS] = pa.array(ts, type=pa.int64())
    arrays[POS] = pa.array(pos, type=pa.int64())
    return pa.table(arrays)


def timestamps(batch: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Event times (µs, increasing) and source positions of batch ``batch`` (0-based)."""
    base = batch * size
    pos = np.arange(base, base + size, dtype=np.int64)
    return pos * 10, pos
