"""The one-sided 95% Clopper-Pearson upper bound, computed with the standard library alone,
against published values and the closed forms at both ends."""

from __future__ import annotations

import pytest

from wm_middleware.semantic import upper_bound


@pytest.mark.parametrize(
    ("failures", "trials", "published"),
    [(1, 10, 0.3942), (2, 20, 0.2826), (0, 10, 0.2589), (0, 300, 0.00994), (5, 50, 0.1988)],
)  # the upper ends of two-sided 90% Clopper-Pearson intervals, as tables print them
def test_the_bound_matches_published_values(failures: int, trials: int, published: float) -> None:
    assert upper_bound(failures, trials) == pytest.approx(published, abs=6e-5)


@pytest.mark.parametrize("trials", [1, 7, 50, 299, 1000])
def test_the_bound_matches_the_closed_forms_at_both_ends(trials: int) -> None:
    assert upper_bound(0, trials) == pytest.approx(1 - 0.05 ** (1 / trials), rel=1e-9)
    assert upper_bound(trials - 1, trials) == pytest.approx(0.95 ** (1 / trials), rel=1e-9)
    assert upper_bound(trials, trials) == 1.0


def test_serving_at_one_percent_takes_299_agreeing_verdicts_and_473_past_one_disagreement() -> None:
    assert upper_bound(0, 299) <= 0.01 < upper_bound(0, 298)
    assert upper_bound(1, 473) <= 0.01 < upper_bound(1, 472)
    assert upper_bound(0, 0) == 1.0
