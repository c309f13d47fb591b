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
