"""The TPC-DI performance metric (clauses 7.5 and 7.6).

* CT_n: the MessageDateAndTime of the PCR of BatchID n (7.5.1);
* EH = CT1 - CT0, EI1 = CT2 - CT1, EI2 = CT3 - CT2, in seconds, timed to 0.1 s rounded up
  (7.1.1: 0.01 s is reported as 0.1 s);
* RH, RI1, RI2: DIGen's row counts of Batch1, Batch2, Batch3 (7.5.2.2, 7.5.3.2) — the generator
  or reader reports them; they are arguments here;
* TH = RH / EH; TI1 = RI1 / Max(EI1, 1800); TI2 = RI2 / Max(EI2, 1800) (7.5.2.3, 7.5.3.3);
* TPC_DI_RPS = Trunc(GeoMean(TH, Min(TI1, TI2))) (7.6.1).
"""

from __future__ import annotations

import datetime
import math
from dataclasses import asdict, dataclass
from typing import Any

from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.pcr import completion_times

#: Clause 7.5.3.3: incremental updates count as lasting at least this long.
MIN_INCREMENTAL_S = 1800.0


def round_up_tenth(seconds: float) -> float:
    """Clause 7.1.1: timings to 0.1 s, rounded up (0.01 -> 0.1; 2.0 stays 2.0)."""
    return math.ceil(round(seconds * 10, 6)) / 10


@dataclass(frozen=True)
class Metric:
    """The figures of clause 7.5/7.6 for one benchmark run."""

    rh: int
    ri1: int
    ri2: int
    eh: float
    ei1: float
    ei2: float
    th: float
    ti1: float
    ti2: float
    tpc_di_rps: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def explain(self) -> str:
        """The arithmetic, written out."""
        return (
            f"TH = RH / EH = {self.rh} / {self.eh:.1f} s = {self.th:.1f} rows/s; "
            f"TI1 = RI1 / Max(EI1, 1800) = {self.ri1} / {max(self.ei1, MIN_INCREMENTAL_S):.1f}"
            f" = {self.ti1:.2f}; TI2 = {self.ri2} / {max(self.ei2, MIN_INCREMENTAL_S):.1f} = "
            f"{self.ti2:.2f}; TPC_DI_RPS = Trunc(GeoMean(TH, Min(TI1, TI2))) = {self.tpc_di_rps}"
        )


def compute_metric(rh: int, ri1: int, ri2: int, eh: float, ei1: float, ei2: float) -> Metric:
    """The metric from the row counts and the elapsed times (seconds, already rounded to 0.1).

    Raises ``ValueError`` when an elapsed time is not positive or a row count is negative.
    """
    for name, value in (("EH", eh), ("EI1", ei1), ("EI2", ei2)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {value}")
    for name, rows in (("RH", rh), ("RI1", ri1), ("RI2", ri2)):
        if rows < 0:
            raise ValueError(f"{name} must be >= 0 rows, got {rows}")
    th = rh / eh
    ti1 = ri1 / max(ei1, MIN_INCREMENTAL_S)
    ti2 = ri2 / max(ei2, MIN_INCREMENTAL_S)
    rps = math.trunc(math.sqrt(th * min(ti1, ti2)))
    return Metric(rh, ri1, ri2, eh, ei1, ei2, th, ti1, ti2, rps)


def elapsed_times(ct: dict[int, datetime.datetime]) -> tuple[float, float, float]:
    """(EH, EI1, EI2) in seconds, rounded up to 0.1, from the completion timestamps CT0..CT3.

    Raises ``ValueError`` naming a missing PCR."""
    missing = [b for b in (0, 1, 2, 3) if b not in ct]
    if missing:
        raise ValueError(f"no phase completion record for batch(es) {missing}")

    def span(a: int, b: int) -> float:
        return round_up_tenth((ct[b] - ct[a]).total_seconds())

    return span(0, 1), span(1, 2), span(2, 3)


def metric_from_warehouse(conn: WarehouseConnection, rh: int, ri1: int, ri2: int) -> Metric:
    """The metric of the run recorded in the warehouse's PCR rows, with DIGen's row counts."""
    eh, ei1, ei2 = elapsed_times(completion_times(conn))
    return compute_metric(rh, ri1, ri2, eh, ei1, ei2)
