"""`tp job metrics` and `tp job compare` as a user meets them in a real lab: runs made with
`tp submit --local`, read back through `tp` processes.

What a user found: no `--json`; `--plot` replacing any file without a word; a run with no metrics
stopping a comparison; a run id the lab does not know told "no ingest database"; the same run named
twice drawn as two columns of one.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

NS = "{http://www.w3.org/2000/svg}"
TRAIN = """#!/usr/bin/env bash
set -euo pipefail
python - <<'PY'
from tuneplane import report
for step in range(1, 11):
    report.log({"loss": 2.0 / step, "eval_loss": 2.5 / step, "grad_norm": 1.0 + step % 3,
                "hw/gpu_util": 40.0 + step}, step=step)
report.finish()
PY
"""
SILENT = "#!/usr/bin/env bash\necho nothing to report\n"


def _submit(tp, lab: Path, exp: str) -> str:  # type: ignore[no-untyped-def]
    result = tp(
        "submit",
        exp,
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


@pytest.fixture()
def runs(tp, lab: Path, git) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    """Two runs that report (train/loss, validation/loss, grad norm, hardware) and one that does not."""
    for exp, script in (("sft", TRAIN), ("quiet", SILENT)):
        assert tp("new", exp, "--method", "custom/custom", cwd=lab).code == 0
        (lab / f"experiments/{exp}/train.sh").write_text(script)
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "two experiments")
    return _submit(tp, lab, "sft"), _submit(tp, lab, "sft"), _submit(tp, lab, "quiet")


def test_metrics_json_lists_keys_in_reading_order_with_their_raw_keys(
    tp_subprocess, lab: Path, runs: tuple[str, str, str]
) -> None:
    first, _, _ = runs
    shown = tp_subprocess("job", "metrics", first, "--json", cwd=lab)
    assert shown.code == 0, shown.output
    data = json.loads(shown.out)
    assert data["run"] == first
    keys = [m["key"] for m in data["metrics"]]
    assert keys[:2] == ["train/loss", "validation/loss"] and keys[-1] == "hw/gpu_util", keys
    by_key = {m["key"]: m for m in data["metrics"]}
    assert by_key["train/loss"]["raw"] == "loss" and by_key["validation/loss"]["raw"] == "eval_loss"
    assert by_key["train/loss"]["last"] == pytest.approx(0.2) and by_key["train/loss"]["count"] == 10
    raw = tp_subprocess("job", "metrics", first, "--json", "--key", "eval_loss", cwd=lab)
    assert raw.code == 0 and [m["key"] for m in json.loads(raw.out)["metrics"]] == ["eval_loss"], raw.output


def test_plot_never_replaces_a_users_file_and_says_when_it_replaces_a_chart(
    tp, lab: Path, runs: tuple[str, str, str]
) -> None:
    first, _, _ = runs
    notes = lab.parent / "notes.svg"
    notes.write_text("my own drawing\n")
    refused = tp("job", "metrics", first, "--plot", notes, cwd=lab)
    assert refused.code == 2 and "not a chart tp wrote" in refused.err, refused.output
    assert notes.read_text() == "my own drawing\n"
    assert "train/loss" not in refused.out  # refused before any work is shown
    drawing = '<svg xmlns="http://www.w3.org/2000/svg" width="300" height="200">\n<circle r="5"/></svg>\n'
    notes.write_text(drawing)  # another tool's SVG is the user's too
    assert tp("job", "metrics", first, "--plot", notes, cwd=lab).code == 2 and notes.read_text() == drawing

    chart = lab.parent / "chart.svg"
    assert tp("job", "metrics", first, "--plot", chart, cwd=lab).code == 0
    again = tp("job", "metrics", first, "--plot", chart, cwd=lab)
    assert again.code == 0 and f"replaced {chart}" in again.err, again.output
    ET.fromstring(chart.read_text())

    missing = tp("job", "metrics", first, "--plot", lab.parent / "no/such/folder/c.svg", cwd=lab)
    assert missing.code == 2 and "does not exist" in missing.err and "Traceback" not in missing.output
    folder = tp("job", "metrics", first, "--plot", lab.parent, cwd=lab)
    assert folder.code == 2 and "is a folder" in folder.err, folder.output


def test_compare_says_a_run_has_no_metrics_and_compares_the_rest(
    tp_subprocess, lab: Path, runs: tuple[str, str, str]
) -> None:
    first, second, quiet = runs
    out = lab.parent / "compare.svg"
    compared = tp_subprocess("job", "compare", first, second, quiet, "--plot", out, cwd=lab)
    assert compared.code == 0, compared.output
    assert f"{quiet}: no metrics stored" in compared.out, compared.out
    assert f"{first}: experiment=sft\n{second}: experiment=sft\n" in compared.out, compared.out  # what differs
    row = next(line.split() for line in compared.out.splitlines() if line.split()[:1] == ["train/loss"])
    assert row == ["train/loss", "0.2", "0.2", "-"], compared.out
    texts = ["".join(t.itertext()) for t in ET.fromstring(out.read_text()).iter(f"{NS}text")]
    assert any(t.startswith(quiet) and "no metrics" in t for t in texts), texts
    only_quiet = tp_subprocess("job", "compare", quiet, quiet, cwd=lab)
    assert only_quiet.code == 2 and "named twice" in only_quiet.err, only_quiet.output


def test_compare_and_metrics_name_a_run_the_lab_does_not_know(
    tp_subprocess, lab: Path, runs: tuple[str, str, str]
) -> None:
    first, second, _ = runs
    for args in (("metrics", "20990101-000000-deadbeef00"), ("compare", first, "20990101-000000-deadbeef00")):
        result = tp_subprocess("job", *args, cwd=lab)
        assert result.code == 2, result.output
        assert "no run '20990101-000000-deadbeef00' in this lab" in result.err, result.output
        assert "Traceback" not in result.output
    twice = tp_subprocess("job", "compare", first, f"sft/{first}", cwd=lab)
    assert twice.code == 2 and f"{first} is named twice" in twice.err, twice.output


def test_compare_rows_follow_the_reading_order_over_all_runs(tp, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A key only the second run logged takes its place among the first run's, not after its hardware."""
    from tuneplane.ingest.store import MetricStore

    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    store.add_points("run-a", [(k, s, 1.0 + s, "") for s in range(3) for k in ("loss", "hw/cpu_util")], None)
    store.add_points("run-b", [(k, s, 2.0 + s, "") for s in range(3) for k in ("eval_loss", "loss")], None)
    store.close()
    monkeypatch.chdir(tmp_path)
    compared = tp("job", "compare", "run-a", "run-b", "--db", db)
    assert compared.code == 0, compared.output
    rows = [line.split()[0] for line in compared.out.splitlines()[3:]]
    assert rows == ["train/loss", "validation/loss", "hw/cpu_util"], compared.out


def test_compare_columns_tell_runs_apart_when_their_ids_end_alike(tp, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tuneplane.ingest.store import MetricStore

    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    runs = ["lr-0.001-warmup-seed-1", "lr-0.002-warmup-seed-1"]  # the same last 10 characters
    for number, run in enumerate(runs):
        store.add_points(run, [("loss", s, float(number + s), "") for s in range(3)], None)
    store.close()
    monkeypatch.chdir(tmp_path)
    compared = tp("job", "compare", *runs, "--db", db)
    assert compared.code == 0, compared.output
    header = compared.out.splitlines()[2].split()
    assert (
        header[0] == "key" and len(set(header[1:])) == 2 and all(h in r for h, r in zip(header[1:], runs, strict=True))
    ), header


def test_compare_reads_a_run_without_a_store_as_no_metrics(
    tp_subprocess,
    tp,
    lab: Path,  # type: ignore[no-untyped-def]
    runs: tuple[str, str, str],
) -> None:
    """A request not run yet (submitted without --local: no store, and this lab has no receiver
    database) is a run the lab knows with no metrics, not a failed comparison."""
    first, second, _ = runs
    made = tp(
        "submit",
        "sft",
        "--profile",
        "local",
        "--image",
        "python:3.12",
        "--observability-url",
        "https://track.example.org/p",
        cwd=lab,
    )
    assert made.code == 0, made.output
    waiting = next(line.split()[1] for line in made.out.splitlines() if line.startswith("wrote "))
    waiting = Path(waiting).stem
    assert not (lab / ".tuneplane/ingest.sqlite").exists()
    compared = tp_subprocess("job", "compare", first, second, waiting, cwd=lab)
    assert compared.code == 0, compared.output
    assert f"{waiting}: no metrics stored" in compared.out, compared.out
    row = next(line.split() for line in compared.out.splitlines() if line.split()[:1] == ["train/loss"])
    assert row == ["train/loss", "0.2", "0.2", "-"], compared.out
    alone = tp_subprocess("job", "metrics", waiting, cwd=lab)  # one run: said, without a traceback
    assert alone.code == 2 and f"no metrics stored for run {waiting!r}" in alone.err, alone.output
    given = tp_subprocess("job", "compare", first, waiting, "--db", lab / "no-such.sqlite", cwd=lab)
    assert given.code == 2 and "no ingest database at" in given.err, given.output  # a --db given must exist


def test_metrics_table_cuts_a_long_key_and_aligns_wide_ones_by_display_width(
    tp,
    tmp_path: Path,  # type: ignore[no-untyped-def]
    monkeypatch,
) -> None:
    """One 300-character key padded every row to 300 columns; a CJK key (two columns a character)
    pushed its row's numbers out of line. Every row's `last` value ends in the same column."""
    import unicodedata

    from tuneplane.ingest.store import MetricStore

    long_key = "train/" + "x" * 294
    keys = {
        long_key: 1.5,
        "train/损失": 2.25,
        "train/ｌｏｓｓ": 3.0,
        "train/loss": 4.5,
        "train/e\u0301": 5.0,
        "train/a\nb": 6.0,
    }
    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    store.add_points("run-w", [(k, s, v, "") for s in range(3) for k, v in keys.items()], None)
    store.close()
    monkeypatch.chdir(tmp_path)
    shown = tp("job", "metrics", "run-w", "--db", db)
    assert shown.code == 0, shown.output
    lines = shown.out.splitlines()

    def cols(text: str) -> int:
        return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)

    table = [line for line in lines if not line.startswith("(")]
    assert len(table) == 1 + len(keys), shown.out  # the newline in a key does not break its row
    header_end = cols(table[0][: table[0].index("last") + len("last")])
    for line in table[1:]:  # the key, its padding, then `last` right-aligned under its header
        found = re.match(r"(\S+)( +)(\S+)", line)
        assert found and cols(line[: found.end(3)]) == header_end, shown.out
    assert max(cols(line) for line in table) < 120, shown.out
    cut = next(line for line in table if line.startswith("train/xxx"))
    assert "…" in cut and cols(cut.split()[0]) == 48, cut
    assert "train/a\\nb" in shown.out
    assert lines[-1] == "(1 key(s) cut to 48 columns; --json prints them whole)", shown.out
    whole = json.loads(tp("job", "metrics", "run-w", "--db", db, "--json").out)
    assert long_key in [m["key"] for m in whole["metrics"]]


def test_a_name_shows_one_series_in_key_table_and_compare(tp, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`predict()` logs `test_loss`, canonically `eval/loss`; a job that also logged `eval/loss`
    (transformers' validation, canonically `validation/loss`) sees the same series under each name in
    `--key`, the table and `tp job compare`: a canonical name answers before a raw key of that spelling."""
    from tuneplane.ingest.store import MetricStore

    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    for run, shift in (("run-e", 0.0), ("run-f", -1.0)):
        store.add_points(
            run,
            [("test_loss", s, 9.0 + shift, "") for s in range(2)]
            + [("eval/loss", s, 0.5 + shift / 4, "") for s in range(4)],
            None,
        )
    store.close()
    monkeypatch.chdir(tmp_path)
    shown = json.loads(
        tp("job", "metrics", "run-e", "--db", db, "--key", "eval/loss", "--key", "validation/loss", "--json").out
    )
    assert [(m["key"], m["raw"]) for m in shown["metrics"]] == [
        ("eval/loss", "test_loss"),
        ("validation/loss", "eval/loss"),
    ]
    table = json.loads(tp("job", "metrics", "run-e", "--db", db, "--json").out)
    assert {m["key"]: m["raw"] for m in table["metrics"]}["eval/loss"] == "test_loss"
    compare = tp("job", "compare", "run-e", "run-f", "--db", db)
    assert compare.code == 0, compare.output
    rows = {line.split()[0]: line.split()[1:3] for line in compare.out.splitlines() if line.split()}
    assert rows["eval/loss"] == ["9", "8"] and rows["validation/loss"] == ["0.5", "0.25"], compare.out


def test_compare_cuts_long_keys_and_aligns_wide_ones_like_metrics(tp, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import unicodedata

    from tuneplane.ingest.store import MetricStore

    db = tmp_path / "ingest.sqlite"
    store = MetricStore(db)
    for number, run in enumerate(("run-one-xx", "run-two-xx")):
        store.add_points(
            run,
            [
                (k, s, float(number + 1), "")
                for s in range(2)
                for k in ("train/" + "y" * 294, "train/损失", "train/loss")
            ],
            None,
        )
    store.close()
    monkeypatch.chdir(tmp_path)
    compared = tp("job", "compare", "run-one-xx", "run-two-xx", "--db", db)
    assert compared.code == 0, compared.output
    rows = compared.out.splitlines()[2:]
    widths = {sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line) for line in rows}
    assert len(widths) == 1 and widths.pop() < 90, compared.out  # every row as wide, none 300 columns
    assert any("y…" in line for line in rows), compared.out
