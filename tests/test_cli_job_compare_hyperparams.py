"""`tp job compare` names the hyperparameters that differ between runs, as each job was started with
them: config.yaml merged with `--set`, kept in each run's status.

What a user found: a run trained at 3e-3 from config.yaml compared as `learning_rate=(unset)`, because
statuses kept no hyperparameters and the comparison read only the request's `--set`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.installed import needs

from tuneplane.lab.runs import RunKey, read_status, status_text
from tuneplane.models.run import RunRequest, RunStatus
from tuneplane.runs.hyperparams import MAX_CHARS, MAX_KEYS, MAX_LEFT_OUT, kept_hyperparameters

# The experiment's own train.py, small enough for a test: it reads what the platform hands it (the
# config file and the validated overrides) and reports the learning rate it trains with.
TRAIN = """\
import argparse, json
import yaml
from tuneplane import report

parser = argparse.ArgumentParser()
parser.add_argument("--config")
parser.add_argument("--output-dir")
parser.add_argument("--overrides-json", default="{}")
args = parser.parse_args()
config = yaml.safe_load(open(args.config))
config.update(json.loads(args.overrides_json))
for step in range(1, 4):
    report.log({"loss": 1.0 / step, "seen_lr": config["learning_rate"]}, step=step)
report.finish()
"""


OBSERVED = ("--observability-url", "https://track.example.org/p")  # the custom recipe reports elsewhere


def _submit(tp, lab: Path, *args: str) -> str:  # type: ignore[no-untyped-def]
    done = tp("submit", "cls", "--profile", "local", "--local", "--image", "pytorch/pytorch:2.13.0", *args, cwd=lab)
    assert done.code == 0, done.output
    return next(line.split()[1].rstrip(":") for line in done.out.splitlines() if line.startswith("run "))


@pytest.fixture()
def two_rates(tp, lab: Path, git) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Two runs of one experiment: one at 3e-3 from a committed config.yaml, one at 1e-3 by `--set`."""
    needs("torch")  # torchrun starts the recipe's train.py
    assert tp("new", "cls", "--method", "pytorch/image-classification", cwd=lab).code == 0
    (lab / "experiments/cls/train.py").write_text(TRAIN, encoding="utf-8")
    config = lab / "experiments/cls/config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("learning_rate: 0.003", "learning_rate: 0.01"))
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "image classification at 1e-2")
    config.write_text(config.read_text(encoding="utf-8").replace("learning_rate: 0.01", "learning_rate: 3.0e-3"))
    git(lab, "commit", "-q", "-am", "learning rate 3e-3")
    return _submit(tp, lab), _submit(tp, lab, "--set", "learning_rate=0.001")


def test_compare_shows_the_learning_rate_each_run_trained_with(
    tp_subprocess, lab: Path, two_rates: tuple[str, str]
) -> None:
    from_config, from_set = two_rates
    compared = tp_subprocess("job", "compare", from_config, from_set, cwd=lab)
    assert compared.code == 0, compared.output
    assert f"{from_config}: learning_rate=0.003\n{from_set}: learning_rate=0.001\n" in compared.out, compared.out
    as_json = tp_subprocess("job", "compare", from_config, from_set, "--json", cwd=lab)
    differs = {r["run_id"]: r["differs"] for r in json.loads(as_json.out)["runs"]}
    assert differs == {from_config: "learning_rate=0.003", from_set: "learning_rate=0.001"}, as_json.output
    for run, rate in ((from_config, 3e-3), (from_set, 1e-3)):
        status = read_status(lab, RunKey("cls", run))
        assert status is not None
        # what the status keeps is what the job saw: the rate it reported, the rest of config.yaml too
        seen = json.loads(tp_subprocess("job", "metrics", run, "--json", "--key", "seen_lr", cwd=lab).out)
        assert status.hyperparameters["learning_rate"] == rate == seen["metrics"][0]["last"]
        assert status.hyperparameters["optimizer"] == "adamw" and status.hyperparameters["amp"] is False


def test_an_old_status_without_hyperparameters_still_loads_and_compares(
    tp_subprocess, lab: Path, two_rates: tuple[str, str]
) -> None:
    """Statuses written before they kept hyperparameters: the comparison falls back to `--set`."""
    from_config, from_set = two_rates
    for run in two_rates:
        path = lab / RunKey("cls", run).status_rel
        data = json.loads(path.read_text(encoding="utf-8"))
        del data["hyperparameters"], data["hyperparameters_left_out"]
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")
        assert read_status(lab, RunKey("cls", run)) is not None
    compared = tp_subprocess("job", "compare", from_config, from_set, cwd=lab)
    assert compared.code == 0, compared.output
    assert f"{from_config}: learning_rate=(unset)\n{from_set}: learning_rate=0.001\n" in compared.out, compared.out


def test_a_huge_nested_config_stays_bounded_and_says_what_it_left_out() -> None:
    config: dict[str, object] = {f"layer{i}": {"width": i, "notes": "x" * 5000} for i in range(200)}
    config |= {"optim": {"lr": 3e-3, "betas": [0.9, 0.99]}, "warmup": None, "zeta": float("nan"), "empty": {}}
    kept, left_out = kept_hyperparameters(config, first=["optim.lr"])
    assert len(kept) == MAX_KEYS and next(iter(kept)) == "optim.lr" and kept["optim.lr"] == 3e-3
    assert kept["layer0.width"] == 0 and kept["layer0.notes"] == "x" * (MAX_CHARS - 1) + "…"
    assert len(left_out) == MAX_LEFT_OUT + 1 and left_out[-1].startswith("… and ") and left_out[-1].endswith(" more")
    total = int(left_out[-1].split()[2]) + MAX_LEFT_OUT
    assert total == 200 * 2 + 5 - MAX_KEYS  # every leaf not kept is named or counted
    _, named = kept_hyperparameters({"optim": {"lr": 1, "betas": [0.9]}, "warmup": None, "zeta": float("inf")})
    assert named == ["optim.betas", "warmup", "zeta"]


def test_a_status_with_a_huge_config_stays_small(tp, lab: Path, git) -> None:  # type: ignore[no-untyped-def]
    """The status a submitted run starts with, for a config of thousands of keys and long text: small,
    and it reads back. (A custom run keeps its `--set` only: tp never parses its config.yaml.)"""
    from tuneplane.backends.base import BackendRef
    from tuneplane.lab.load import load_lab
    from tuneplane.runs.prepare import prepare
    from tuneplane.runs.status import submitted_status

    assert tp("new", "big", "--method", "custom/custom", cwd=lab).code == 0
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "an experiment")
    request = RunRequest(
        experiment="big",
        run_id="20260101-000000-abcdef",
        profile="local",
        image="python:3.12",
        observability_url="https://track.example.org/p",
        set={"learning_rate": 0.003},
    )
    run = prepare(load_lab(lab), request, commit="0" * 40, dirty=False)
    assert run.config == {"learning_rate": 0.003}  # custom: the request's --set, as the job gets it
    huge = {f"block{i}": {"size": i, "text": "y" * 1000, "list": [1, 2]} for i in range(1000)}
    ref = BackendRef(backend="local", kind="LocalRun", name="big", run_dir=str(lab))
    status = submitted_status(request, run.spec, ref, "2026-01-01T00:00:00Z", {**huge, **run.config})
    assert status.hyperparameters["learning_rate"] == 0.003 and len(status.hyperparameters) == MAX_KEYS
    assert status.hyperparameters_left_out[-1] == f"… and {1000 * 3 + 1 - MAX_KEYS - MAX_LEFT_OUT} more"
    text = status_text(status)
    assert len(text) < 32_000 and RunStatus.model_validate_json(text.encode()) == status
