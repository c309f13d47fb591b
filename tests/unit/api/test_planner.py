"""Plan auto: S-Store's crossover until both plans have timings on a target, then the cheaper
estimate from the recent timings."""

from __future__ import annotations

from api.planner import PlanModel


def test_crossover_rule_until_both_plans_have_timings() -> None:
    model = PlanModel(crossover=0.25)
    assert model.choose("pg", 100_000, 10_000).plan == "migrate"  # 9% staged
    assert model.choose("pg", 100_000, 50_000).plan == "island"  # 33% staged
    decision = model.choose("pg", 100_000, 0)
    assert decision.plan == "migrate" and decision.staged_fraction == 0.0
    for _ in range(5):
        model.observe("pg", "island", 100_000, 10_000, 0.2)
    assert model.choose("pg", 100_000, 50_000).rule == "crossover"  # migrate has no timings


def test_timings_decide_once_both_plans_have_them() -> None:
    model = PlanModel(crossover=0.25)
    # island costs ~1 s per 100k rows in total; migrate ~0.5 s per 100k plus 4 s per 100k staged
    for warehouse, staged in [(100_000, 0), (80_000, 20_000), (50_000, 50_000), (10_000, 90_000)]:
        total = warehouse + staged
        model.observe("duck", "island", warehouse, staged, 0.01 + total / 100_000)
        model.observe(
            "duck", "migrate", warehouse, staged, 0.01 + total / 200_000 + staged / 25_000
        )
    few = model.choose("duck", 95_000, 5_000)  # migrate: 0.51 + 0.2 < island 1.0
    many = model.choose("duck", 60_000, 40_000)  # migrate: 0.51 + 1.6 > island 1.0
    assert (few.plan, few.rule) == ("migrate", "timings")
    assert (many.plan, many.rule) == ("island", "timings")
    island = many.estimates["island"]
    assert island is not None and abs(island - 1.01) < 0.1
    # other targets keep their own timings
    assert model.choose("pg", 60_000, 40_000).rule == "crossover"


def test_recent_timings_outweigh_old_ones() -> None:
    model = PlanModel(crossover=0.25, window=16)
    for _ in range(16):
        model.observe("t", "island", 100_000, 30_000, 5.0)
        model.observe("t", "migrate", 100_000, 30_000, 1.0)
    assert model.choose("t", 100_000, 30_000).plan == "migrate"
    for _ in range(16):  # the island got fast (e.g. the warehouse shrank behind a merge)
        model.observe("t", "island", 100_000, 30_000, 0.2)
    assert model.choose("t", 100_000, 30_000).plan == "island"


def _union_bench_history(model: PlanModel) -> None:
    """What `streamdi bench union` showed on DuckDB: at 100% staged island ~0.05 s, migrate
    ~0.11 s (five runs each)."""
    for seconds in (0.05, 0.046, 0.052, 0.048, 0.05):
        model.observe("duck", "island", 0, 200_000, seconds)
    for seconds in (0.11, 0.105, 0.118, 0.12, 0.108):
        model.observe("duck", "migrate", 0, 200_000, seconds)


def test_the_prior_takes_the_scale_of_the_observations() -> None:
    # no observation near 90% staged: both estimates extrapolate from 100%; a prior in absolute
    # seconds (migrate 1 s per 100k staged rows) used to drag migrate's down to 0.04 s
    model = PlanModel(crossover=0.25)
    _union_bench_history(model)
    decision = model.choose("duck", 20_000, 180_000)
    island, migrate = decision.estimates["island"], decision.estimates["migrate"]
    assert island is not None and migrate is not None
    assert decision.plan == "island" and decision.rule == "timings"
    assert 0.035 < island < 0.065 and 0.075 < migrate < 0.14


def test_nearby_observations_decide_by_their_median() -> None:
    model = PlanModel(crossover=0.25)
    _union_bench_history(model)
    model.observe("duck", "island", 20_000, 180_000, 0.05)
    model.observe("duck", "migrate", 20_000, 180_000, 0.125)
    decision = model.choose("duck", 20_000, 180_000)
    assert decision.plan == "island"
    assert decision.estimates == {"island": 0.05, "migrate": 0.125}
    # one slow island run (a merge, a noisy neighbour) does not turn the choice
    model.observe("duck", "island", 20_000, 180_000, 0.5)
    model.observe("duck", "island", 20_000, 180_000, 0.05)
    assert model.choose("duck", 20_000, 180_000).plan == "island"
    # nearby means within 5% of the rows read: 185k staged is near 180k (not 200k), 150k is not
    assert model.estimate("duck", "migrate", 15_000, 185_000) == 0.125
    far = model.estimate("duck", "migrate", 50_000, 150_000)
    assert far is not None and far != 0.125


def test_nothing_staged_is_not_near_something_staged() -> None:
    # at 0% staged migrate pushes nothing and costs what a warehouse query costs; 5% staged
    # (10k of 200k rows, just at the nearby limit) must not borrow those timings
    model = PlanModel(crossover=0.25)
    for _ in range(5):
        model.observe("pg", "island", 200_000, 0, 0.13)
        model.observe("pg", "migrate", 200_000, 0, 0.10)
    model.observe("pg", "island", 190_000, 10_000, 0.15)
    model.observe("pg", "migrate", 190_000, 10_000, 0.14)
    decision = model.choose("pg", 190_000, 10_000)
    assert decision.estimates == {"island": 0.15, "migrate": 0.14}
    assert decision.plan == "migrate"
