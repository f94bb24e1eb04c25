"""A real run through `tp submit --local` that logs TRL's raw keys shows them under canonical names.

The job logs what TRL's SFTTrainer logs (`loss`, `eval_loss`, `mean_token_accuracy`, `learning_rate`,
`grad_norm`, `epoch`) through `tuneplane.report`; the status file, `tp job metrics`, the committed chart
and the dashboard all say `train/loss` and `validation/loss`, primary metrics first, and the raw key
stays queryable.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

TRAIN = """#!/usr/bin/env bash
set -euo pipefail
python - <<'PY'
import math
from tuneplane import report
for step in range(1, 31):
    report.log({"loss": 2.5 * math.exp(-step / 12), "learning_rate": 2e-5, "grad_norm": 1.0 + step % 3,
                "mean_token_accuracy": 0.4 + step / 100, "epoch": step / 30}, step=step)
    if step % 10 == 0:
        report.log({"eval_loss": 2.6 * math.exp(-step / 14)}, step=step)
report.finish()
PY
"""


def _submit(tp, lab: Path) -> str:  # type: ignore[no-untyped-def]
    result = tp(
        "submit",
        "sft",
        "--profile",
        "local",
        "--local",
        "--image",
        "python:3.12",
        "--observability-url",
        "https://track.example.org/p",
        cwd=lab,
    )
    assert result.code == 0, result.output
    return next(line.split()[1].rstrip(":") for line in result.out.splitlines() if line.startswith("run "))


def test_trl_style_keys_reach_status_metrics_and_chart_under_canonical_names(tp, lab: Path, git) -> None:  # type: ignore[no-untyped-def]
    assert tp("new", "sft", "--method", "custom/custom", cwd=lab).code == 0
    (lab / "experiments/sft/train.sh").write_text(TRAIN)
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "a trainer that logs like TRL")

    run_id = _submit(tp, lab)

    status = json.loads(git(lab, "show", f"HEAD:status/sft/{run_id}.json"))
    assert status["phase"] == "Succeeded"
    assert {"train/loss", "validation/loss", "train/lr"} <= set(status["metrics"])
    assert not {"loss", "eval_loss"} & set(status["metrics"])

    shown = tp("job", "metrics", run_id, cwd=lab)
    assert shown.code == 0, shown.output
    keys = [line.split()[0] for line in shown.out.splitlines()[1:]]
    assert keys[:2] == ["train/loss", "validation/loss"] and "train/token_accuracy" not in keys
    assert "train/mean_token_accuracy" in keys and "train/epoch" in keys
    raw = tp("job", "metrics", run_id, "--key", "eval_loss", cwd=lab)  # the raw key stays queryable
    assert raw.code == 0 and raw.out.splitlines()[1].split()[:2] == ["eval_loss", "0.305"], raw.output

    svg = git(lab, "show", f"HEAD:status/sft/{run_id}.svg")
    titles = [
        "".join(t.itertext())
        for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")
        if t.get("font-weight") == "bold"
    ]
    assert titles[:2] == ["train/loss", "validation/loss"], titles
    assert "train/lr = 2e-05" in svg  # a constant is one line, not a panel
    page = git(lab, "show", "HEAD:status/sft/README.md")
    assert f"![metrics of {run_id}]({run_id}.svg)" in page and "train/loss 0." in page
    index = git(lab, "show", "HEAD:status/README.md")
    assert "[sft](sft/README.md)" in index and "1 succeeded" in index

    other = _submit(tp, lab)
    compared = tp("job", "compare", run_id, other, "--plot", lab.parent / "compare.svg", cwd=lab)
    assert compared.code == 0, compared.output
    assert compared.out.splitlines()[3].split()[0] == "train/loss"  # two legend lines, the header, then rows
    chart = ET.fromstring((lab.parent / "compare.svg").read_text())
    strokes = {p.get("stroke") for p in chart.iter("{http://www.w3.org/2000/svg}path")}
    assert len(strokes) == 2  # two runs, overlaid

    # Each reference is looked up once and shown by its id; an ambiguous prefix is refused, not guessed.
    by_prefix = tp("job", "compare", f"sft/{run_id[:-2]}", other, cwd=lab)
    assert by_prefix.code == 0, by_prefix.output
    assert [line.split(":")[0] for line in by_prefix.out.splitlines()[:2]] == [run_id, other]
    ambiguous = tp("job", "metrics", run_id[:4], cwd=lab)
    assert ambiguous.code == 2 and "matches 2 runs" in ambiguous.err, ambiguous.output


def test_compare_takes_a_key_that_only_some_runs_logged(tp, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tuneplane.ingest.store import MetricStore

    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    store.add_points("run-a", [("loss", s, 1.0 / (s + 1), "") for s in range(5)], None)
    store.add_points(
        "run-b",
        [("loss", s, 2.0 / (s + 1), "") for s in range(5)] + [("reward", s, float(s), "") for s in range(5)],
        None,
    )
    store.close()
    monkeypatch.chdir(tmp_path)  # outside a lab: runs named by id, read from --db
    both = tp(
        "job",
        "compare",
        "run-a",
        "run-b",
        "--db",
        db,
        "--key",
        "reward",
        "--key",
        "train/loss",
        "--plot",
        tmp_path / "c.svg",
    )
    assert both.code == 0, both.output
    rows = [line.split() for line in both.out.splitlines()[3:]]
    assert rows == [["reward", "-", "4"], ["train/loss", "0.2", "0.4"]], both.out
    chart = ET.fromstring((tmp_path / "c.svg").read_text())
    assert len(list(chart.iter("{http://www.w3.org/2000/svg}path"))) == 3  # reward once, loss twice
    none = tp("job", "compare", "run-a", "run-b", "--db", db, "--key", "rewards")
    assert none.code == 2 and "in any of these runs" in none.err and "'train/reward'" in none.err, none.output


def test_a_key_as_the_trainer_logged_it_finds_what_the_callback_stored(tp, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """TunePlaneCallback stores TRL's `loss` and `rewards/margins` as `train/loss` and
    `train/rewards/margins` (transformers' rewrite_logs); `--key` with the name TRL printed still
    answers, in `tp job metrics` and `tp job compare`."""
    from tuneplane.ingest.store import MetricStore

    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    for run, scale in (("run-a", 1.0), ("run-b", 2.0)):
        store.add_points(
            run,
            [
                (key, s, scale * (s + 1), "")
                for s in range(3)
                for key in ("train/loss", "train/rewards/margins", "eval/loss")
            ],
            None,
        )
    store.add_points("run-c", [("hw/cpu_util", s, 5.0, "") for s in range(3)], None)
    store.close()
    monkeypatch.chdir(tmp_path)
    shown = tp("job", "metrics", "run-a", "--db", db, "--key", "loss", "--key", "rewards/margins", "--key", "eval_loss")
    assert shown.code == 0, shown.output
    rows = [line.split()[:2] for line in shown.out.splitlines()[1:]]
    assert rows == [["loss", "3"], ["rewards/margins", "3"], ["eval_loss", "3"]], shown.out
    both = tp(
        "job",
        "compare",
        "run-a",
        "run-b",
        "run-c",
        "--db",
        db,
        "--key",
        "rewards/margins",
        "--plot",
        tmp_path / "c.svg",
    )
    assert both.code == 0, both.output
    rows = [line.split() for line in both.out.splitlines()[4:]]
    assert rows == [["rewards/margins", "3", "6", "-"]], both.out
    chart = ET.fromstring((tmp_path / "c.svg").read_text())
    assert len(list(chart.iter("{http://www.w3.org/2000/svg}path"))) == 2  # run-c has none: nothing of it drawn
