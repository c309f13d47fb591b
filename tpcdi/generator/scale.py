"""How big every table is at a scale factor, and the calendar of the data set.

Volumes are linear in the scale factor and calibrated on DIGen 1.1.0's output at SF=3 (the counts
in the comments), so SF=3 here has about DIGen's SF=3 volumes per file. Small populations keep a
floor (at least one record of each kind per incremental batch, enough companies to trade) so that
fractional scale factors still make a data set on which every audit check has data.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import numpy as np

from tpcdi.exceptions import GeneratorError

EPOCH = datetime.date(1970, 1, 1)


def day(value: datetime.date) -> int:
    """Days since 1970-01-01."""
    return (value - EPOCH).days


def at(value: datetime.date) -> int:
    """Seconds since 1970-01-01 at the start of ``value``."""
    return day(value) * 86_400


#: The calendar (DIGen's): Batch1 is the history up to its batch date; each incremental batch is
#: one day, Batch2 the day after Batch1's date (DIGen writes two, :class:`Calendar` any number).
FIRST_DAY = datetime.date(1950, 1, 1)
BATCH1_DATE = datetime.date(2017, 7, 7)
#: The first second after Batch1 (the start of the first incremental day).
BATCH1_END = at(BATCH1_DATE) + 86_400
DATE_END = datetime.date(2020, 12, 31)  # last row of Date.txt
CM_BEGIN = datetime.date(2007, 7, 7)  # CustomerMgmt.xml actions
FW_BEGIN_YEAR = 1967  # FINWIRE quarter files 1967Q1 .. 2017Q3
TRADE_BEGIN = datetime.date(2012, 7, 7)  # trades, cash transactions, holdings, watches
DM_BEGIN = datetime.date(2015, 7, 6)  # DailyMarket of Batch1: two years up to the day before
#: The most incremental days a data set can have: the last day's DailyMarket date and every
#: event stay inside Date.txt (which ends on :data:`DATE_END`).
MAX_DAYS = (DATE_END - BATCH1_DATE).days


@dataclass(frozen=True)
class Calendar:
    """The batches of a data set and their dates: Batch1, then ``days`` incremental batches of
    one day each (BatchID ``b`` holds the events of :meth:`date` ``(b)``). DIGen's layout is
    ``days=2``. Raises :class:`~tpcdi.exceptions.GeneratorError` for fewer than one day or more
    than :data:`MAX_DAYS`."""

    days: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.days <= MAX_DAYS:
            raise GeneratorError(f"days must be within 1..{MAX_DAYS}, got {self.days}")

    @property
    def last_batch(self) -> int:
        return self.days + 1

    @property
    def batches(self) -> range:
        """Every batch number, 1 (the historical load) to :attr:`last_batch`."""
        return range(1, self.days + 2)

    @property
    def incremental(self) -> range:
        return range(2, self.days + 2)

    def date(self, batch: int) -> datetime.date:
        """The batch date of ``batch`` (BatchDate.txt)."""
        return BATCH1_DATE + datetime.timedelta(days=batch - 1)

    @property
    def horizon(self) -> int:
        """End of the last incremental day, exclusive (seconds): later events are never
        written."""
        return at(self.date(self.last_batch)) + 86_400

    def batch_of(self, seconds: np.ndarray) -> np.ndarray:
        """The batch holding an event at each second (:attr:`last_batch` + 1: after the last
        day, never written)."""
        starts = np.array([at(self.date(b)) for b in self.incremental] + [self.horizon])
        return np.searchsorted(starts, seconds, side="right") + 1


def _count(per_sf: float, sf: float, floor: int = 0) -> int:
    return max(floor, round(per_sf * sf))


@dataclass(frozen=True)
class Scale:
    """Every volume of a data set at scale factor ``sf``."""

    sf: float

    def __post_init__(self) -> None:
        if not self.sf > 0:
            raise GeneratorError(f"scale factor must be > 0, got {self.sf}")

    # HR.csv: 15,000 employees, 4,293 brokers (job code 314) at SF=3
    @property
    def employees(self) -> int:
        return _count(5000, self.sf, 20)

    # CustomerMgmt.xml at SF=3: NEW 4,728 ADDACCT 4,280 UPDACCT 2,568 UPDCUST 1,284 CLOSEACCT 1,284
    # INACT 428; every count but NEW is a multiple of INACT in DIGen, kept here.
    @property
    def cm_inact(self) -> int:
        return _count(428 / 3, self.sf, 1)

    @property
    def cm_new(self) -> int:
        return _count(1576, self.sf, 12)

    @property
    def cm_addacct(self) -> int:
        return 10 * self.cm_inact

    @property
    def cm_updacct(self) -> int:
        return 6 * self.cm_inact

    @property
    def cm_updcust(self) -> int:
        return 3 * self.cm_inact

    @property
    def cm_closeacct(self) -> int:
        return 3 * self.cm_inact

    # Customer.txt / Account.txt per incremental batch at SF=3: customers I 11, U 3, INAC 1;
    # accounts I 21, U 6, INAC 3
    @property
    def inc_customer_new(self) -> int:
        return _count(11 / 3, self.sf, 1)

    @property
    def inc_customer_update(self) -> int:
        return _count(1, self.sf, 1)

    @property
    def inc_customer_inact(self) -> int:
        return _count(1 / 3, self.sf, 1)

    @property
    def inc_account_new(self) -> int:
        return max(self.inc_customer_new + 1, round(7 * self.sf))

    @property
    def inc_account_update(self) -> int:
        return _count(2, self.sf, 1)

    @property
    def inc_account_close(self) -> int:
        return _count(1, self.sf, 1)

    # Prospect.csv: 14,982 rows; 60 changes per incremental batch (30% new, 30% gone, 40% changed)
    @property
    def prospects(self) -> int:
        return _count(4994, self.sf, 20)

    @property
    def prospect_changes(self) -> int:
        return _count(20, self.sf, 3)

    # FINWIRE at SF=3: CMP 1,500 (1,096 companies, 86 in 1967Q1), SEC 2,400 (1,998 symbols),
    # FIN 98,576
    @property
    def cmp_records(self) -> int:
        return _count(500, self.sf, 30)

    @property
    def companies(self) -> int:
        return max(12, round(self.cmp_records * 1096 / 1500))

    @property
    def first_quarter_companies(self) -> int:
        return max(10, round(self.companies * 86 / 1096))

    @property
    def sec_records(self) -> int:
        return _count(800, self.sf, 40)

    @property
    def securities(self) -> int:
        return max(30, round(self.sec_records * 1998 / 2400))

    #: Share of company-quarters with a FIN record (98,576 at SF=3)
    fin_share: float = 0.80

    # Trade.txt: 390,978 trades in Batch1 (over 5 years) and 214 new per incremental day at SF=3;
    # a position is a buy and, once the buy completes, a sell of the same holding.
    @property
    def positions_per_day(self) -> float:
        return max(2.0, 118.0 * self.sf / 3)

    # WatchHistory.txt: Batch1 720,710 ACTV + 179,332 CNCL; per incremental batch 1,679 + 419
    @property
    def watches(self) -> int:
        return _count(720710 / 3, self.sf, 20)

    @property
    def inc_watches(self) -> int:
        return _count(1679 / 3, self.sf, 2)

    @property
    def inc_watch_cancels(self) -> int:
        return _count(419 / 3, self.sf, 1)

    watch_cancel_share: float = 179332 / 720710
