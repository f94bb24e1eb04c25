"""Run ids, request and status files, phase transitions and the dashboard: the lifecycle's plain parts."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.repos import request

from tuneplane.backends.base import Observation
from tuneplane.check.params import parse_sets
from tuneplane.errors import AmbiguousRun, RunNotFound, UsageError
from tuneplane.lab.runs import (
    SCHEMA_LINE,
    RunKey,
    dump_request,
    find_run,
    mark_cancel,
    new_run_id,
    parse_request,
    read_request,
    read_status,
    request_keys,
    status_keys,
    status_text,
    write_request,
    write_status,
)
from tuneplane.models.run import RUN_ID_RE, RunStatus, Transition
from tuneplane.record.publish import pick_status
from tuneplane.runs.observe import apply_observation, check_transition, is_legal, with_metrics
from tuneplane.views.dashboard import sparkline


def status(phase: str = "Submitted", **fields) -> RunStatus:  # type: ignore[no-untyped-def]
    base = {
        "experiment": "demo",
        "run_id": "20250101-000000-000001",
        "phase": phase,
        "profile": "local",
        "history": [Transition(phase=phase, at="2025-01-01T00:00:00Z")],
    }
    base.update(fields)
    return RunStatus(**base)


# ── ids and request files ────────────────────────────────────────────────────────────────────────


def test_run_ids_sort_by_time_and_do_not_collide() -> None:
    early = new_run_id(datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC))
    late = new_run_id(datetime(2025, 3, 4, 5, 6, 8, tzinfo=UTC))
    assert re.match(RUN_ID_RE, early) and early.startswith("20250304-050607-")
    assert early < late
    assert len({new_run_id() for _ in range(2000)}) == 2000


def test_a_request_round_trips_and_reads_well(tmp_path: Path) -> None:
    req = request(
        "demo",
        "20250101-000000-000001",
        "h200:8",
        set={"lr": 2e-5, "name": "1e-3", "flag": True},
        inputs={"model": "Qwen/Qwen3-8B"},
        timeout=3600,
        message="try: higher lr",
    )
    text = dump_request(req)
    assert text.startswith(SCHEMA_LINE + "\n")
    assert "name: '1e-3'" in text  # a string that looks like a number stays a string
    assert "inputs:\n  model: Qwen/Qwen3-8B\n" in text and "commit:" not in text and "cancel: false" in text
    assert parse_request(text, "runs/demo/x.yaml") == req


def test_a_request_file_is_never_overwritten(tmp_path: Path) -> None:
    req = request("demo", "20250101-000000-000001")
    path = write_request(tmp_path, req)
    path.write_text(path.read_text() + "# my note\n")
    with pytest.raises(UsageError, match="already exists"):
        write_request(tmp_path, req)
    assert path.read_text().endswith("# my note\n")


def test_cancel_keeps_the_persons_comments(tmp_path: Path) -> None:
    key = RunKey("demo", "20250101-000000-000001")
    path = write_request(tmp_path, request("demo", key.run_id))
    path.write_text(path.read_text().replace("profile: local", "profile: local  # small first"))

    mark_cancel(tmp_path, key)

    text = path.read_text()
    assert text.startswith(SCHEMA_LINE) and "profile: local  # small first" in text
    assert read_request(tmp_path, key).cancel is True


def test_a_broken_request_names_the_place(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as err:
        parse_request("apiVersion: tuneplane/run/v1\nexperiment: demo\nrun_id: nope\nprofile: local\n", "r.yaml")
    assert err.value.message.startswith("r.yaml:3:") and "run_id" in err.value.message


def test_find_run_accepts_ids_prefixes_and_paths(tmp_path: Path) -> None:
    for exp, run_id in (
        ("a", "20250101-000000-aaaaaa"),
        ("b", "20250101-000000-bbbbbb"),
        ("b", "20250102-000000-cccccc"),
    ):
        write_request(tmp_path, request(exp, run_id))
    assert find_run(tmp_path, "20250102").run_id == "20250102-000000-cccccc"
    assert find_run(tmp_path, "a/20250101") == RunKey("a", "20250101-000000-aaaaaa")
    assert find_run(tmp_path, "runs/b/20250101-000000-bbbbbb.yaml") == RunKey("b", "20250101-000000-bbbbbb")
    with pytest.raises(UsageError, match="matches 2 runs"):
        find_run(tmp_path, "20250101")
    with pytest.raises(UsageError, match="no run 'zzz'"):
        find_run(tmp_path, "zzz")
    assert [k.experiment for k in request_keys(tmp_path)] == ["a", "b", "b"]


def _three_runs(root: Path) -> None:
    for exp, run_id in (
        ("a", "20250101-000000-aaaaaa1234"),
        ("b", "20250101-000000-bbbbbb1234"),
        ("b", "20250102-000000-cccccc5678"),
    ):
        write_request(root, request(exp, run_id))


def test_a_run_is_found_by_a_unique_suffix_too(tmp_path: Path) -> None:
    """`tp job compare` heads its columns with the end of each run id: that end finds the run."""
    _three_runs(tmp_path)
    assert find_run(tmp_path, "cccccc5678") == RunKey("b", "20250102-000000-cccccc5678")
    assert find_run(tmp_path, "aa1234") == RunKey("a", "20250101-000000-aaaaaa1234")
    assert find_run(tmp_path, "b/5678") == RunKey("b", "20250102-000000-cccccc5678")
    assert find_run(tmp_path, "20250102-000000-cccccc5678") == RunKey("b", "20250102-000000-cccccc5678")


def test_an_ambiguous_reference_is_its_own_error_and_lists_every_match(tmp_path: Path) -> None:
    _three_runs(tmp_path)
    with pytest.raises(AmbiguousRun) as err:
        find_run(tmp_path, "1234")  # the end of two runs
    assert err.value.matches == [RunKey("a", "20250101-000000-aaaaaa1234"), RunKey("b", "20250101-000000-bbbbbb1234")]
    assert "a/20250101-000000-aaaaaa1234" in str(err.value) and "b/20250101-000000-bbbbbb1234" in str(err.value)
    with pytest.raises(AmbiguousRun):
        find_run(tmp_path, "2025010")  # the start of all three
    with pytest.raises(RunNotFound) as missing:
        find_run(tmp_path, "zzz")
    assert isinstance(missing.value, UsageError) and isinstance(err.value, UsageError)  # both exit 2


def test_status_files_round_trip_and_refuse_damage(tmp_path: Path) -> None:
    original = status("Running", metrics={"loss": 0.5}, started_at="2025-01-01T00:01:00Z")
    path = write_status(tmp_path, original)
    assert read_status(tmp_path, RunKey("demo", original.run_id)) == original
    assert status_keys(tmp_path) == [RunKey("demo", original.run_id)]
    assert json.loads(path.read_text())["apiVersion"] == "tuneplane/status/v1"
    path.write_text('{"phase": "Exploded"}')
    with pytest.raises(UsageError, match="restore the file from git"):
        read_status(tmp_path, RunKey("demo", original.run_id))


def test_set_values_are_read_as_yaml_scalars() -> None:
    assert parse_sets(["lr=2e-5", "epochs=3", "flag=true", "name=run a", "empty="]) == {
        "lr": 2e-5,
        "epochs": 3,
        "flag": True,
        "name": "run a",
        "empty": "",
    }
    with pytest.raises(UsageError, match="is not KEY=VALUE"):
        parse_sets(["lr"])
    with pytest.raises(UsageError, match="not a single value"):
        parse_sets(["x=[1, 2]"])


# ── phases ───────────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "old, new, legal",
    [
        (None, "Submitted", True),
        ("Submitted", "Pending", True),
        ("Submitted", "Succeeded", True),
        ("Pending", "Running", True),
        ("Running", "Failed", True),
        ("Pending", "Pending", True),
        ("Running", "Pending", False),
        ("Running", "Submitted", False),
        ("Succeeded", "Running", False),
        ("Failed", "Succeeded", False),
        ("Cancelled", "Running", False),
        ("Succeeded", "Succeeded", True),
    ],
)
def test_only_legal_transitions(old: str | None, new: str, legal: bool) -> None:
    assert is_legal(old, new) is legal
    if not legal:
        with pytest.raises(ValueError, match=f"cannot go from {old} to {new}"):
            check_transition(old, new)


def test_observations_move_forward_and_record_history() -> None:
    running = apply_observation(status(), Observation("Running", started_at="2025-01-01T00:01:00Z"), "now")
    assert running.phase == "Running" and running.started_at == "2025-01-01T00:01:00Z"
    backwards = apply_observation(running, Observation("Pending", reason="Requeued"), "later")
    assert backwards == running
    unknown = apply_observation(running, Observation("Unknown", message="API timeout"), "later")
    assert unknown.phase == "Running" and unknown.message == "API timeout"
    done = apply_observation(
        running,
        Observation("Failed", reason="Error", message="exit 2", exit_code=2, finished_at="2025-01-01T00:09:00Z"),
        "later",
    )
    assert (done.phase, done.exit_code, done.finished_at) == ("Failed", 2, "2025-01-01T00:09:00Z")
    assert [(t.phase, t.at) for t in done.history] == [
        ("Submitted", "2025-01-01T00:00:00Z"),
        ("Running", "2025-01-01T00:01:00Z"),
        ("Failed", "2025-01-01T00:09:00Z"),
    ]
    assert apply_observation(done, Observation("Succeeded"), "later") == done


def test_a_fast_job_gets_its_running_step() -> None:
    done = apply_observation(
        status(),
        Observation("Succeeded", started_at="2025-01-01T00:00:05Z", finished_at="2025-01-01T00:00:09Z", exit_code=0),
        "now",
    )
    assert [t.phase for t in done.history] == ["Submitted", "Running", "Succeeded"]


def test_metrics_take_canonical_names_primary_first_and_keep_short_history() -> None:
    from tuneplane.metrics.vocab import Vocabulary

    summary = {
        "loss": {"last": 0.1, "count": 50},
        "accuracy": {"last": 0.9, "count": 2},
        "lr": {"last": 1e-4, "count": 50},
        "hw/gpu_util": {"last": 99.0, "count": 50},
    }
    series = {"loss": [float(i) for i in range(50)], "accuracy": [0.5, 0.9]}
    vocab = Vocabulary.of({"accuracy": "validation/accuracy"}, ["validation/accuracy"])
    named = with_metrics(status(), summary, series, list(vocab.primary), vocab)
    assert list(named.metrics) == ["validation/accuracy", "train/loss", "train/lr", "hw/gpu_util"]
    assert named.metrics["validation/accuracy"] == 0.9 and named.metrics["train/lr"] == 1e-4
    assert named.metric_history["validation/accuracy"] == [0.5, 0.9]
    history = named.metric_history["train/loss"]  # 20 points over the whole run, first to last
    assert len(history) == 20 and (history[0], history[-1]) == (0.0, 49.0) and history == sorted(history)
    default = with_metrics(status(), summary, series, [])  # custom: train/loss first, hardware last
    assert list(default.metrics)[0] == "train/loss" and list(default.metrics)[-1] == "hw/gpu_util"


def test_an_800_step_run_that_converged_falls_from_left_to_right_in_its_sparkline() -> None:
    """The issue's run (5.7 → 0.38 over 800 steps, noisy at the end): its last 20 values alone look like
    noise; the status keeps the whole run in 20 points, and the sparkline falls."""
    values = [5.7 * 0.9967**i + (0.02 if i % 2 else -0.02) for i in range(800)]
    named = with_metrics(status(), {"loss": {"last": values[-1], "count": 800}}, {"loss": values}, [])
    history = named.metric_history["train/loss"]
    assert len(history) == 20 and history[0] == round(values[0], 3) and history[-1] == pytest.approx(values[-1], 1e-3)
    assert all(a > b for a, b in zip(history, history[1:], strict=False)), history
    drawn = sparkline(history)
    assert drawn[0] == "█" and drawn[-1] == "▁", drawn


def test_a_status_keeps_every_namespace_the_run_reported() -> None:
    """Seven `train/` keys and one `env/` key in a custom run: the status keeps the first few and the
    guide's own `env/tool_success_rate` too, not six `train/` keys alone; and a run that reports a
    thousand keys keeps a bounded number of them."""
    summary = {f"train/k{i}": {"last": 1.0, "count": 3} for i in range(7)}
    summary["env/tool_success_rate"] = {"last": 0.5, "count": 3}
    named = with_metrics(status(), summary, {}, [])
    assert "env/tool_success_rate" in named.metrics and len(named.metrics) == 7, list(named.metrics)
    wide = {f"ns{i}/k": {"last": 1.0, "count": 3} for i in range(1000)}
    assert len(with_metrics(status(), wide, {}, []).metrics) == 24


def test_a_status_file_keeps_its_metrics_in_reading_order(tmp_path: Path) -> None:
    """Primary first, hardware last in the file too (a reader of the JSON sees what the dashboard
    shows); every other key stays sorted, and a local run's file and the bot's are written alike."""
    from tuneplane.metrics.vocab import Vocabulary

    summary = {
        "loss": {"last": 0.1, "count": 5},
        "accuracy": {"last": 0.9, "count": 2},
        "hw/gpu_util": {"last": 99.0, "count": 5},
    }
    series = {"loss": [0.3, 0.2, 0.1], "accuracy": [0.5, 0.9], "hw/gpu_util": [98.0, 99.0]}
    vocab = Vocabulary.of({"accuracy": "validation/accuracy"}, ["validation/accuracy"])
    named = with_metrics(status("Succeeded"), summary, series, list(vocab.primary), vocab)
    order = ["validation/accuracy", "train/loss", "hw/gpu_util"]
    path = write_status(tmp_path, named)
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert list(on_disk["metrics"]) == order and list(on_disk["metric_history"]) == order
    assert list(on_disk) == sorted(on_disk) and list(on_disk["provenance"]) == sorted(on_disk["provenance"])
    assert path.read_text(encoding="utf-8") == status_text(named)
    assert '"train/loss": [0.3, 0.2, 0.1]' in status_text(named)  # a sparkline stays on one line
    assert list(read_status(tmp_path, RunKey("demo", named.run_id)).metrics) == order


# ── the dashboard and conflicts ──────────────────────────────────────────────────────────────────


def test_the_experiment_page_lists_its_runs_newest_first(tmp_path: Path) -> None:
    from tuneplane.views.dashboard import experiment_page, month_page, phase_counts

    write_status(
        tmp_path,
        status(
            "Succeeded",
            run_id="20250101-000000-000001",
            method="custom/custom",
            started_at="2025-01-01T00:00:00Z",
            finished_at="2025-01-01T01:02:03Z",
            metrics={"train/loss": 0.123456},
            metric_history={"train/loss": [4.0, 2.0, 1.0, 0.5]},
        ),
    )
    write_status(
        tmp_path,
        status(
            "Failed",
            run_id="20250102-000000-000002",
            reason="Error",
            message="loss exploded | nan\nmore",
            started_at="2025-01-02T00:00:00Z",
            finished_at="2025-01-02T00:00:12.3Z",
        ),
    )
    (tmp_path / "status/demo/20250103-000000-000003.json").write_text("{not json")
    write_status(tmp_path, status("Succeeded", run_id="20241231-000000-000000"))  # an earlier month
    write_request(tmp_path, request("demo", "20250101-000000-000001"))  # a row links the request it has

    counts = phase_counts(tmp_path, "demo")
    text = experiment_page(tmp_path, "demo", counts)

    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == [
        "20250103-000000-000003",
        "20250102-000000-000002",
        "20250101-000000-000001",
    ]
    assert "⚠️ unreadable" in rows[0]
    assert "❌ Failed (Error): loss exploded \\| nan" in rows[1] and "| 12.3s |" in rows[1]
    assert "| 1h 02m |" in rows[2] and "| train/loss 0.1235 |" in rows[2]
    assert "[request](../../runs/demo/20250101-000000-000001.yaml) · [status](20250101-000000-000001.json)" in rows[2]
    assert "**4 runs** · 1 failed · 2 succeeded · 1 unreadable" in text
    # the page shows the newest month's runs and links the earlier months' pages
    assert "## Runs of 2025-01" in text and "[2024-12](2024-12.md)" in text and "(2025-01.md)" not in text
    assert [r.split("`")[1] for r in month_page(tmp_path, "demo", "2025-01").splitlines() if r.startswith("| `")] == [
        r.split("`")[1] for r in rows
    ]


def test_sparklines_scale_to_the_range() -> None:
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "▁▁▁" and sparkline([1]) == "" and sparkline([]) == ""


def test_a_conflict_keeps_the_more_advanced_status() -> None:
    def text(phase: str, n: int = 1) -> str:
        return json.dumps({"phase": phase, "history": [{}] * n})

    assert pick_status(text("Submitted"), text("Running")) == text("Running")
    assert pick_status(text("Succeeded"), text("Running")) == text("Succeeded")
    assert pick_status(text("Submitted"), text("Submitted")) == text("Submitted")  # tie: the published one
    assert pick_status(text("Pending", 1), text("Pending", 2)) == text("Pending", 2)
    assert pick_status("{broken", text("Submitted")) == text("Submitted")
    assert pick_status(None, text("Submitted")) == text("Submitted")


# ── unchecked statuses ────────────────────────────────────────────────────────────────────────────


def test_an_unchecked_status_reads_what_the_bot_writes_as_its_model_says() -> None:
    from tuneplane.lab.runs import StatusAttempt, StatusObject, StatusOwner, unchecked_status
    from tuneplane.models.run import Attempt, BackendObject, SubmittedFor

    written = status(
        "Failed",
        reason="Error",
        message="boom",
        profile="local",
        started_at="2025-01-02T00:00:00Z",
        finished_at="2025-01-02T00:01:00Z",
        backend=BackendObject(backend="local", kind="Process", name="p", run_dir="/runs/p", uid="u"),
        submitted_for=SubmittedFor(commit="c" * 40, pull_request=3, login="Bob"),
        attempts=[Attempt(number=1, started_at="2025-01-02T00:00:00Z", reason="Error", gpus=2, gpu_seconds=120.0)],
        metrics={"loss": 0.5},
        metric_history={"loss": [0.9, 0.5]},
        history=[Transition(phase="Submitted", at="t0"), Transition(phase="Failed", at="t1")],
    )

    seen = unchecked_status(status_text(written))

    assert seen is not None
    assert (seen.experiment, seen.run_id, seen.phase, seen.reason, seen.message) == (
        written.experiment,
        written.run_id,
        "Failed",
        "Error",
        "boom",
    )
    assert (seen.profile, seen.started_at, seen.finished_at, seen.submitted_at) == (
        "local",
        "2025-01-02T00:00:00Z",
        "2025-01-02T00:01:00Z",
        "",
    )
    assert seen.backend == StatusObject(
        backend="local", kind="Process", name="p", namespace="", run_dir="/runs/p", uid="u"
    )
    assert seen.submitted_for == StatusOwner(login="Bob", pull_request=3)
    assert seen.attempts == (StatusAttempt(gpu_seconds=120.0, started_at="2025-01-02T00:00:00Z", reason="Error"),)
    assert seen.history == (("Submitted", "t0"), ("Failed", "t1"))
    assert dict(seen.metrics) == {"loss": 0.5} and seen.series("loss") == (0.9, 0.5)


def test_an_unchecked_status_reads_a_forged_field_as_empty_and_never_raises() -> None:
    """A status a pull request wrote: a field of another type reads as that field's empty value, a list
    keeps its entries of the right shape, and what is no JSON object is no status at all."""
    from tuneplane.lab.runs import StatusAttempt, StatusOwner, unchecked_status

    forged = unchecked_status(
        json.dumps(
            {
                "phase": ["Running"],
                "reason": {"why": 1},
                "started_at": 12,
                "backend": "kubernetes",
                "submitted_for": "bob",
                "attempts": [3, {"gpu_seconds": "lots", "started_at": None}, {"gpu_seconds": float("inf")}],
                "history": "all of it",
                "metrics": {"loss": "low", "acc": 0.9, "ok": True},
                "metric_history": {"acc": [0.1, "x", 0.9], "loss": "down"},
            }
        )
    )

    assert forged is not None
    assert (forged.phase, forged.reason, forged.started_at) == ("", "", "12")
    assert forged.backend is None and forged.history == ()
    assert forged.submitted_for == StatusOwner(login="", pull_request=None)  # said, in no shape the bot writes
    assert forged.attempts == (StatusAttempt(0.0, "", ""), StatusAttempt(0.0, "", ""))
    assert forged.series("loss") == () and forged.series("none") == ()
    assert dict(forged.metrics) == {"acc": 0.9} and forged.series("acc") == (0.1, 0.9)
    for broken in (None, b"", b"{broken", b"[1, 2]", b'"text"', b"\xff\xfe", b"[" * 100_000):
        assert unchecked_status(broken) is None, broken


def test_an_unchecked_status_of_an_older_tp_finds_the_run_directory_in_the_namespace() -> None:
    from tuneplane.lab.runs import unchecked_status

    older = unchecked_status(json.dumps({"backend": {"backend": "local", "name": "p", "namespace": "/runs/p"}}))
    cluster = unchecked_status(json.dumps({"backend": {"backend": "kubernetes", "name": "j", "namespace": "team"}}))

    assert older is not None and older.backend is not None and cluster is not None and cluster.backend is not None
    assert (older.backend.namespace, older.backend.run_dir) == ("", "/runs/p")
    assert (cluster.backend.namespace, cluster.backend.run_dir) == ("team", "")


def test_reading_an_unchecked_status_refuses_a_link_and_an_oversized_file(tmp_path: Path) -> None:
    from tuneplane.constants import BLOB_LIMIT
    from tuneplane.lab.runs import read_unchecked

    key, big, link = (RunKey("demo", f"20250101-00000{n}-00000{n}") for n in range(3))
    (tmp_path / "status" / "demo").mkdir(parents=True)
    (tmp_path / key.status_rel).write_text(json.dumps({"phase": "Running"}), encoding="utf-8")
    (tmp_path / big.status_rel).write_text(json.dumps({"phase": "Running", "pad": "x" * BLOB_LIMIT}), encoding="utf-8")
    (tmp_path / link.status_rel).symlink_to(tmp_path / key.status_rel)

    found = read_unchecked(tmp_path, key)

    assert found is not None and found.phase == "Running"
    assert read_unchecked(tmp_path, big) is None and read_unchecked(tmp_path, link) is None
    assert read_unchecked(tmp_path, RunKey("demo", "20250101-000009-000009")) is None


def test_an_unchecked_status_reads_a_number_past_floats_range_as_absent() -> None:
    """JSON allows an integer of any length; `float()` of one past its range raises. A pull request's
    status holding one must not stop the bot's pass that reads it (its metric and GPU time: absent)."""
    from tuneplane.lab.runs import StatusAttempt, unchecked_status

    huge = "1" + "0" * 400
    text = (
        f'{{"phase": "Running", "metrics": {{"loss": {huge}, "acc": 0.5}}, '
        f'"metric_history": {{"loss": [{huge}, 2]}}, "attempts": [{{"gpu_seconds": {huge}, "started_at": "t"}}]}}'
    )
    status = unchecked_status(text)
    assert status is not None and status.phase == "Running"
    assert dict(status.metrics) == {"acc": 0.5} and status.series("loss") == (2.0,)
    assert status.attempts == (StatusAttempt(0.0, "t", ""),)


def test_an_unchecked_status_names_its_run_with_strings_only() -> None:
    """Which run a status says it is gets compared with the run of its path: a number there is not the
    experiment or run spelled by its digits, so a status naming experiment 123 is not experiment "123"."""
    from tuneplane.lab.runs import unchecked_status

    status = unchecked_status('{"experiment": 123, "run_id": true, "phase": "Running", "reason": 5}')
    assert status is not None
    assert (status.experiment, status.run_id) == ("", "")
    assert status.reason == "5"  # a text shown to a person keeps what was written
