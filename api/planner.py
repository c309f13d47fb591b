"""Plan ``auto``: island or migrate, from the staged fraction and recent timings.

Every query that ran as ``island`` or ``migrate`` leaves an observation on its target: the rows
the warehouse held for the tables it read (``warehouse_rows``), the staged change rows above the
warehouse's watermark (``staged_rows``) and how long it took. A :class:`PlanModel` estimates a
plan's seconds on a target from them:

* **Nearby**: when some of the plan's recent observations read about as many rows with about as
  many of them staged (both less than ``nearby`` of the rows the query reads apart, and staged
  rows on both sides or on neither: with nothing staged ``migrate`` pushes nothing), the median
  of the newest ``recent`` of them. What the same plan just cost at the same size is the best
  predictor (queries repeat, the staged fraction drifts slowly), and a median shrugs off one slow
  run.
* **Otherwise** it fits ``seconds ~ c0 + c1 * (warehouse_rows + staged_rows) + c2 * staged_rows``
  (the rows a query reads, and the rows that are still staged) to the recent observations (newer
  ones weigh more) by ridge regression pulled towards a prior, so a cost the observations say
  nothing about (all of them at one size, or no staged rows yet) stays at the prior instead of
  collapsing to zero. The prior gives the shape (how the costs relate); its scale is taken from
  the observations, so a machine or table much faster or slower than the prior's does not drag
  an extrapolation towards the prior's seconds.

:meth:`PlanModel.choose` picks the plan with the lower estimate once both plans of a target have
an estimate (nearby observations, or ``min_observations`` for the fit); until then it follows
S-Store's measurement: migrate while the staged fraction is at most ``crossover`` (25%), island
above it. The decision carries both estimates so an answer can say why.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

ChosenPlan = Literal["island", "migrate"]

#: Rows per unit of a feature (keeps the regression well scaled).
_SCALE = 100_000.0
#: Prior seconds: (intercept, per 100k rows read, per 100k of them still staged).
_PRIORS: dict[str, tuple[float, float, float]] = {
    "island": (0.01, 0.3, 0.0),
    "migrate": (0.01, 0.25, 1.0),
}


@dataclass(frozen=True)
class Observation:
    warehouse_rows: int
    staged_rows: int
    seconds: float


@dataclass(frozen=True)
class PlanDecision:
    """Why ``auto`` chose ``plan``: the staged fraction and each plan's estimate (seconds;
    ``None`` until the plan has timings), or the crossover rule while it has none."""

    plan: ChosenPlan
    staged_fraction: float
    estimates: dict[str, float | None]
    rule: Literal["timings", "crossover"]


def _features(warehouse_rows: int, staged_rows: int) -> np.ndarray:
    return np.array([1.0, (warehouse_rows + staged_rows) / _SCALE, staged_rows / _SCALE])


class PlanModel:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        *,
        crossover: float = 0.25,
        window: int = 64,
        min_observations: int = 3,
        decay: float = 0.95,
        ridge: float = 0.05,
        nearby: float = 0.05,
        recent: int = 5,
    ) -> None:
        self.crossover = crossover
        self.window = window
        self.min_observations = min_observations
        self.decay = decay
        self.ridge = ridge
        self.nearby = nearby
        self.recent = recent
        self._observations: dict[tuple[str, str], deque[Observation]] = {}
        self._lock = threading.Lock()

    def observe(
        self, target: str, plan: ChosenPlan, warehouse_rows: int, staged_rows: int, seconds: float
    ) -> None:
        with self._lock:
            history = self._observations.setdefault((target, plan), deque(maxlen=self.window))
            history.append(Observation(warehouse_rows, staged_rows, seconds))

    def observations(self, target: str, plan: ChosenPlan) -> list[Observation]:
        with self._lock:
            return list(self._observations.get((target, plan), ()))

    def estimate(
        self, target: str, plan: ChosenPlan, warehouse_rows: int, staged_rows: int
    ) -> float | None:
        """Estimated seconds of ``plan`` on ``target``: the median of the newest nearby
        observations, else the fit (``None`` below ``min_observations``)."""
        history = self.observations(target, plan)
        near = self._near(history, warehouse_rows, staged_rows)
        if near:
            return float(np.median([o.seconds for o in near[-self.recent :]]))
        if len(history) < self.min_observations:
            return None
        coefficients = self._fit(plan, history)
        x = _features(warehouse_rows, staged_rows)
        return float(max(0.0, float(x @ coefficients)))

    def _near(
        self, history: list[Observation], warehouse_rows: int, staged_rows: int
    ) -> list[Observation]:
        """The observations (oldest first) that read about as many rows, about as many staged."""
        total = warehouse_rows + staged_rows
        near = []
        for o in history:
            seen = o.warehouse_rows + o.staged_rows
            slack = self.nearby * max(total, seen, 1)
            if (
                abs(seen - total) < slack
                and abs(o.staged_rows - staged_rows) < slack
                and (o.staged_rows == 0) == (staged_rows == 0)
            ):
                near.append(o)
        return near

    def _fit(self, plan: str, history: list[Observation]) -> np.ndarray:
        n = len(history)
        x = np.array([_features(o.warehouse_rows, o.staged_rows) for o in history])
        y = np.array([o.seconds for o in history])
        weights = self.decay ** np.arange(n - 1, -1, -1, dtype=float)
        prior = np.array(_PRIORS[plan])
        # the prior's shape at the observations' scale
        expected = float(weights @ (x @ prior))
        if expected > 0:
            prior = prior * (float(weights @ y) / expected)
        # minimise sum w (y - x b)^2 + ridge * |b - prior|^2
        xtw = x.T * weights
        lhs = xtw @ x + self.ridge * np.eye(3)
        rhs = xtw @ y + self.ridge * prior
        coefficients: np.ndarray = np.asarray(np.linalg.solve(lhs, rhs), dtype=float)
        return coefficients

    def choose(self, target: str, warehouse_rows: int, staged_rows: int) -> PlanDecision:
        total = warehouse_rows + staged_rows
        fraction = staged_rows / total if total else 0.0
        island = self.estimate(target, "island", warehouse_rows, staged_rows)
        migrate = self.estimate(target, "migrate", warehouse_rows, staged_rows)
        estimates: dict[str, float | None] = {"island": island, "migrate": migrate}
        if staged_rows == 0:
            # nothing to move: migrating is a no-op and the warehouse answers alone
            return PlanDecision("migrate", fraction, estimates, "crossover")
        if island is None or migrate is None:
            plan: ChosenPlan = "migrate" if fraction <= self.crossover else "island"
            return PlanDecision(plan, fraction, estimates, "crossover")
        return PlanDecision(
            "migrate" if migrate <= island else "island", fraction, estimates, "timings"
        )
