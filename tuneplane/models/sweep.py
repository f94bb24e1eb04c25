"""`sweeps/<name>.yaml`: a set of runs over a grid and/or a seeded sample, reviewed like a run request.

A sweep expands deterministically (`expand`): the same file always gives the same trials in the same
order with the same run ids, so writing it again adds nothing and `tp validate` can check that the
requests under `runs/<exp>/` are exactly its expansion.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from typing import Final, Literal, Self

from pydantic import Field, model_validator

from tuneplane.constants import Scalar
from tuneplane.models.base import NAME_RE, Strict, defaults_of, empty_dict
from tuneplane.models.run import PROFILE_RE, Inputs
from tuneplane.runtime.records import FrozenRecord

SWEEP_API: Final = "tuneplane/sweep/v1"
SWEEPS_DIR: Final = "sweeps"
STAMP_RE: Final = r"^[0-9]{8}-[0-9]{6}$"
MAX_TRIALS: Final = 1000  # a sweep is reviewed file by file: more requests than this are not reviewable


class Sample(Strict):
    """Draw `count` trials from the grid's combinations, the same ones for the same `seed`."""

    count: int = Field(ge=1, le=MAX_TRIALS, description="Trials to draw from the grid's combinations.")
    seed: int = Field(0, ge=0, description="Seed of the draw: the same seed draws the same trials.")


class Sweep(Strict):
    """What `tp sweep` writes: one experiment run over parameter values; every trial is a run request."""

    api_version: Literal["tuneplane/sweep/v1"] = Field(SWEEP_API, alias="apiVersion")
    kind: Literal["Sweep"] = "Sweep"
    name: str = Field(pattern=NAME_RE, max_length=100, description="The sweep's name: its file is sweeps/<name>.yaml.")
    experiment: str = Field(pattern=NAME_RE)
    profile: str = Field(pattern=PROFILE_RE, description="NAME or NAME:TOTAL_GPUS, for every trial.")
    created_at: str = Field(pattern=STAMP_RE, description="UTC YYYYMMDD-HHMMSS: the start of every trial's run id.")
    image: str = ""
    observability_url: str = ""
    set: dict[str, Scalar] = Field(default_factory=empty_dict, description="Overrides every trial shares.")
    inputs: Inputs = Field(default_factory=defaults_of(Inputs))
    timeout: int | None = Field(None, ge=60, description="Seconds before each trial's job is stopped.")
    grid: dict[str, list[Scalar]] = Field(
        default_factory=empty_dict, description="Parameter → values; trials are every combination."
    )
    sample: Sample | None = Field(None, description="Run a seeded random sample of the combinations instead.")
    max_trials: int = Field(64, ge=1, le=MAX_TRIALS, description="Most trials the sweep may expand to.")
    reruns: dict[str, int] = Field(
        default_factory=empty_dict, description="Trial run id → times its trial was run again (tp sweep rerun)."
    )
    early_stopping: None = Field(None, description="Reserved for early stopping; not supported yet, leave it out.")
    requested_by: str = ""
    message: str = ""

    @model_validator(mode="after")
    def _grid_values(self) -> Self:
        for key, values in self.grid.items():
            if not values:
                raise ValueError(f"grid parameter {key!r} has no values: give it one or more")
            if len({_canonical(v) for v in values}) != len(values):
                raise ValueError(f"grid parameter {key!r} names a value twice: name each value once")
            if key in self.set:
                raise ValueError(f"{key!r} is both in `set` and in `grid`: a parameter is fixed or swept, not both")
        return self


class Trial(FrozenRecord):
    """One run of a sweep: its parameters and run id (`rerun` > 0: the trial run again that often)."""

    index: int
    params: dict[str, Scalar]
    run_id: str
    rerun: int = 0
    rerun_of: str = ""

    @property
    def first_id(self) -> str:
        """The run id of the trial's first run, which `reruns` counts by."""
        return self.rerun_of if self.rerun else self.run_id


def combinations(sweep: Sweep) -> list[dict[str, Scalar]]:
    """Every combination of the grid, keys in sorted order so reordering the file changes nothing."""
    keys = sorted(sweep.grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(sweep.grid[k] for k in keys))]


def chosen(sweep: Sweep) -> list[dict[str, Scalar]]:
    """The combinations the sweep runs: all of them, or its seeded sample (in grid order)."""
    every = combinations(sweep)
    if sweep.sample is None or sweep.sample.count >= len(every):
        return every
    picked = sorted(random.Random(sweep.sample.seed).sample(range(len(every)), sweep.sample.count))
    return [every[i] for i in picked]


def trial_id(sweep: Sweep, params: dict[str, Scalar], rerun: int = 0) -> str:
    """A run id valid under `RUN_ID_RE`: the sweep's stamp, then 12 hex digits of a digest of the sweep's
    name, the trial's parameters (types included: 1 and 1.0 differ) and the rerun number."""
    text = json.dumps([sweep.name, sweep.experiment, _canonical(params), rerun], sort_keys=True)
    return f"{sweep.created_at}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def expand(sweep: Sweep) -> list[Trial]:
    """Every run of the sweep, reruns after their trial; the same sweep always expands the same."""
    out: list[Trial] = []
    for index, params in enumerate(chosen(sweep)):
        first = trial_id(sweep, params)
        out.append(Trial(index, params, first))
        previous = first
        for n in range(1, sweep.reruns.get(first, 0) + 1):
            run_id = trial_id(sweep, params, n)
            out.append(Trial(index, params, run_id, n, previous))
            previous = run_id
    return out


def trial_count(sweep: Sweep) -> int:
    """How many trials (not counting reruns) the sweep expands to."""
    every = 1
    for values in sweep.grid.values():
        every *= len(values)
    return min(every, sweep.sample.count) if sweep.sample is not None else every


def _canonical(value: object) -> str:
    """A value with its type, so `1`, `1.0`, `true` and `"1"` are four different values."""
    return json.dumps(value, sort_keys=True, default=str) + ":" + type(value).__name__
