"""A sweep expands deterministically: valid run ids, the same on every expansion, whatever the order of
the file's keys; values of different types are different trials; a sample is seeded."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tuneplane.models.run import RUN_ID
from tuneplane.models.sweep import Sweep, expand, trial_count

BASE = {"name": "s", "experiment": "demo", "profile": "local", "created_at": "20261202-101500"}


def sweep(**fields: object) -> Sweep:
    return Sweep.model_validate({**BASE, **fields})


def test_every_combination_is_a_trial_with_a_valid_stable_id() -> None:
    a = sweep(grid={"lr": [1e-5, 3e-5], "seed": [0, 1, 2]})
    b = sweep(grid={"seed": [0, 1, 2], "lr": [1e-5, 3e-5]})  # keys in another order: the same sweep
    trials = expand(a)
    assert len(trials) == trial_count(a) == 6
    assert all(RUN_ID.match(t.run_id) and t.run_id.startswith("20261202-101500-") for t in trials)
    assert [t.run_id for t in trials] == [t.run_id for t in expand(b)] == [t.run_id for t in expand(a)]
    assert len({t.run_id for t in trials}) == 6


def test_the_name_and_the_value_types_tell_trials_apart() -> None:
    ints, floats = expand(sweep(grid={"x": [1]})), expand(sweep(grid={"x": [1.0]}))
    assert ints[0].run_id != floats[0].run_id
    assert expand(sweep(name="t", grid={"x": [1]}))[0].run_id != ints[0].run_id


def test_a_sample_is_seeded_and_reruns_follow_their_trial() -> None:
    grid = {"a": [1, 2, 3, 4], "b": [True, False]}
    one, again, other = (expand(sweep(grid=grid, sample={"count": 3, "seed": s})) for s in (1, 1, 2))
    assert len(one) == 3 and one == again and one != other
    first = one[1].run_id
    rerun = expand(sweep(grid=grid, sample={"count": 3, "seed": 1}, reruns={first: 2}))
    assert [t.rerun_of for t in rerun if t.rerun] == [first, rerun[2].run_id]
    assert [t.run_id for t in rerun if not t.rerun] == [t.run_id for t in one]


@pytest.mark.parametrize(
    "bad",
    [
        {"grid": {"lr": []}},
        {"grid": {"lr": [1, 1]}},
        {"grid": {"lr": [1]}, "set": {"lr": 2}},
        {"early_stopping": {"patience": 2}},
        {"created_at": "2026-12-02"},
    ],
)
def test_malformed_sweeps_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        sweep(**bad)
