"""The dashboard as the git host shows it, for labs people really have: an experiment of hundreds of
runs in one month, reasons and names full of Markdown, runs of a second. Pages go through the bot's own
writer (`Batch`) into a real git repository; every link of every committed page must name a file of
the committed tree, and no page may grow with the experiment."""

from __future__ import annotations

import json
import re
from pathlib import Path

from support.repos import broken_links, git, make_remote, seed_lab
from support.wait import wait_until

from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.runs import write_request
from tuneplane.models.run import RunStatus, Transition
from tuneplane.record.batch import Batch
from tuneplane.views.dashboard import PAGE, duration_text, experiment_page, failure_line, index_page, phase_counts


def _status(run_id: str, phase: str = "Submitted", exp: str = "a", **fields: object) -> RunStatus:
    day = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T00:00:00Z"
    return RunStatus(
        experiment=exp,
        run_id=run_id,
        phase=phase,
        profile="local",  # type: ignore[arg-type]
        history=[Transition(phase=phase, at=day)],
        **fields,
    )  # type: ignore[arg-type]


def _commit(repo: GitRepo, statuses: list[RunStatus]) -> list[str]:
    from support.repos import request

    paths = [
        write_request(repo.root, request(s.experiment, s.run_id))
        for s in statuses
        if not (repo.root / "runs" / s.experiment / f"{s.run_id}.yaml").exists()
    ]
    if paths:
        git(repo.root, "add", "--", *map(str, paths))
        git(repo.root, "commit", "-q", "-m", "merge the requests")
    batch = Batch(repo)
    for status in statuses:
        batch.status(status)
    batch.render([], [])
    assert batch.commit("tp bot: test") is not None
    return sorted(git(repo.root, "diff", "--name-only", "HEAD~1", "HEAD").splitlines())


def _ids(count: int, start: int = 0, day: str = "20250110") -> list[str]:
    return [f"{day}-{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}-{i:010x}" for i in range(start, start + count)]


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| `")]


def test_an_experiment_of_hundreds_of_runs_in_one_month_keeps_every_page_bounded(tmp_path: Path) -> None:
    repo = GitRepo(seed_lab(make_remote(tmp_path), tmp_path / "lab", {"a": "echo hi\n"}))
    ids = _ids(PAGE * 2 + 30)
    for at in range(0, len(ids), 46):  # merges of 46 requests at a time, all in January
        changed = _commit(repo, [_status(r) for r in ids[at : at + 46]])
        pages = [p for p in changed if p.endswith(".md")]
        # a merge writes the index, the experiment page and at most the part it filled
        assert len(pages) <= 3, pages
    readme = (repo.root / "status/a/README.md").read_text()
    assert len(_rows(readme)) == PAGE and f"`{ids[-1]}`" in _rows(readme)[0]
    for number, name in ((1, "2025-01.md"), (2, "2025-01-p2.md")):
        part = (repo.root / "status/a" / name).read_text()
        assert len(_rows(part)) == PAGE
        assert f"`{ids[number * PAGE - 1]}`" in _rows(part)[0] and f"`{ids[(number - 1) * PAGE]}`" in _rows(part)[-1]
        assert f"({name})" in readme
    assert not (repo.root / "status/a/2025-01-p3.md").exists()  # still filling: on the experiment page
    shown = {
        m
        for page in ("README.md", "2025-01.md", "2025-01-p2.md")
        for m in re.findall(r"`(\d{8}-\d{6}-[0-9a-f]+)`", (repo.root / "status/a" / page).read_text())
    }
    assert shown == set(ids)  # every run is on a page
    assert broken_links(repo.root) == []

    early = ids[5]  # a run of the first part ends: that part's page changes, no other
    changed = _commit(repo, [_status(early, "Succeeded")])
    assert "status/a/2025-01.md" in changed and "status/a/2025-01-p2.md" not in changed
    assert "✅ Succeeded" in (repo.root / "status/a/2025-01.md").read_text()

    _commit(repo, [_status("20250201-000000-00000000ff")])  # February: January's last part gets its page
    assert len(_rows((repo.root / "status/a/2025-01-p3.md").read_text())) == 30
    readme = (repo.root / "status/a/README.md").read_text()
    parts = "[2025-01](2025-01.md) ([1](2025-01.md), [2](2025-01-p2.md), [3](2025-01-p3.md))"
    assert len(_rows(readme)) == 1 and parts in readme
    assert broken_links(repo.root) == []
    assert git(repo.root, "status", "--porcelain") == ""


def test_text_from_a_run_is_shown_as_written_and_cannot_break_the_page(tmp_path: Path) -> None:
    hostile = "boom | *bad* _x_ <!-- hidden `tick` [link](http://x) ![img](y) ~~s~~ $x$ &amp;"
    root = tmp_path
    for run_id, fields in (
        (
            "20250102-000000-000002",
            {
                "phase": "Failed",
                "reason": "Error<br>",
                "message": f"exited with code 1; last lines:\nstep 9\n{hostile}",
                "method": "custom/*x*",
                "metrics": {"<b>|loss": 0.5, "train/loss": 0.25},
            },
        ),
        ("20250101-000000-000001", {"phase": "Succeeded", "metrics": {"eval/acc": "_high_"}}),
    ):
        path = root / "status" / "a_b_" / f"{run_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"experiment": "a_b_", "run_id": run_id, "profile": "p|*", **fields}))
    counts = {"a_b_": phase_counts(root, "a_b_")}
    for text in (
        index_page(root, counts, problems=[f"runs/x/<y>.yaml: {hostile}"]),
        experiment_page(root, "a_b_", counts["a_b_"]),
    ):
        assert "<!--" not in text.replace("<!-- Written by `tp bot`", "")  # the page's own note only
        for raw in ("<b>", "<br>", "*bad*", "_x_", "[link]", "![img]", "~~s~~", "$x$", "&amp;", "`tick`"):
            assert re.search(r"(?<!\\)" + re.escape(raw), text) is None, (raw, text)
        assert r"boom \| \*bad\* \_x\_ \<\!-- hidden \`tick\` \[link\](http://x)" in text, text
        for line in _rows(text) + [ln for ln in text.splitlines() if ln.startswith("| [")]:
            assert len(re.findall(r"(?<!\\)\|", line)) == line.count("|") - line.count("\\|")
        assert "a\\_b\\_" in text
    index = index_page(root, counts)
    failed = next(line for line in index.splitlines() if line.startswith("| [`20250102-000000-000002`]"))
    assert "exited with code 1; last lines: boom" in failed  # the reason, not only its introduction


def test_a_failure_line_is_the_reason_not_only_its_introduction() -> None:
    assert (
        failure_line("exited with code 1; last lines:\nsome\nno such data set: /data")
        == "exited with code 1; last lines: no such data set: /data"
    )
    assert failure_line("\n\nCUDA out of memory\nmore") == "CUDA out of memory"
    assert failure_line("exited with code 2; last lines:") == "exited with code 2"  # the job wrote nothing
    assert len(failure_line("x" * 500)) == 160
    long = failure_line("exited with code 1; last lines:\n" + "y" * 500)
    assert len(long) <= 160 and long.startswith("exited with code 1")


def test_durations_recorded_to_the_second_claim_no_decimal() -> None:
    start = "2025-01-01T00:00:00Z"
    assert duration_text(start, "2025-01-01T00:00:00Z") == "<1s"  # not "0.00s": it ran, within a second
    assert duration_text(start, "2025-01-01T00:00:12Z") == "12s"
    assert duration_text(start, "2025-01-01T00:00:12.34Z") == "12.3s"
    assert duration_text("2025-01-01T00:00:00.5Z", "2025-01-01T00:00:00.54Z") == "0.04s"
    assert duration_text(start, "2025-01-01T00:01:12Z") == "1m 12s"


def test_every_committed_chart_is_reachable_from_a_page_and_a_run_without_one_links_none(tmp_path: Path) -> None:
    from tuneplane.lab.runs import RunKey

    repo = GitRepo(seed_lab(make_remote(tmp_path), tmp_path / "lab", {"a": "echo hi\n"}))
    january, february = _ids(8, day="20250110"), _ids(2, day="20250210")
    _commit(repo, [_status(r) for r in january + february])
    batch = Batch(repo)
    for run_id in january[:6] + february:  # two January runs end without metrics: no chart
        batch.status(_status(run_id, "Succeeded"))
        if run_id not in january[4:6]:
            batch.chart(RunKey("a", run_id), '<svg xmlns="http://www.w3.org/2000/svg"/>\n')
    batch.render([], [])
    assert batch.commit("tp bot: test") is not None

    files = git(repo.root, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    pages = "\n".join(
        git(repo.root, "show", f"HEAD:{f}") for f in files if f.startswith("status/a/") and f.endswith(".md")
    )
    charts = [f.rsplit("/", 1)[1] for f in files if f.endswith(".svg")]
    assert len(charts) == 6
    for name in charts:
        assert f"({name})" in pages, name
    for run_id in january[4:6]:
        assert f"({run_id}.svg)" not in pages
    assert broken_links(repo.root) == []


def test_sparklines_of_values_at_the_ends_of_the_float_range_render(tmp_path: Path) -> None:
    from tuneplane.views.dashboard import sparkline

    assert sparkline([1e308, -1e308, 0.0]) == "█▁▅"
    assert sparkline([float("inf"), 1.0, float("nan"), 2.0]) == "▁█"  # what is no number is left out
    assert sparkline([True, 1, 2]) == "▁█"  # a flag is no metric
    path = tmp_path / "status/a/20250101-000000-000001.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {"phase": "Failed", "metrics": {"train/loss": 1e308}, "metric_history": {"train/loss": [1e308, -1e308]}}
        )
    )
    counts = {"a": phase_counts(tmp_path, "a")}
    assert "train/loss 1e+308 █▁" in index_page(tmp_path, counts)


def test_a_local_run_of_a_second_shows_its_duration_with_a_decimal(tmp_path: Path) -> None:
    import os

    from support.repos import BRANCH, clone, tp_run

    remote = make_remote(tmp_path)
    seed_lab(remote, tmp_path / "seed", {"a": "sleep 0.3\n"}, runs=[("a", "20250102-100000-00000a")])
    bot = clone(remote, tmp_path / "bot")
    env = {"TUNEPLANE_STORAGE_ROOT": os.environ["TUNEPLANE_STORAGE_ROOT"]}
    assert tp_run(bot, "bot", "reconcile", "--push", env=env)[0] == 0

    def status() -> str:
        return git(bot, "show", "HEAD:status/a/20250102-100000-00000a.json")

    def succeeded() -> bool:
        assert tp_run(bot, "bot", "sync", "--push", env=env)[0] == 0
        return "Succeeded" in status()

    wait_until(succeeded, 60, 0.3, lambda: f"the run did not end: {status()}")

    row = next(
        line
        for line in git(bot, "show", f"{BRANCH}:status/README.md").splitlines()
        if line.startswith("| [`20250102-100000-00000a`]")
    )
    assert re.search(r"\| [0-9]+\.[0-9]+s \|", row), row  # e.g. 0.35s or 1.2s: not "0s", not "<1s"


def test_a_run_removed_from_a_full_month_moves_the_parts_after_it(tmp_path: Path) -> None:
    repo = GitRepo(seed_lab(make_remote(tmp_path), tmp_path / "lab", {"a": "echo hi\n"}))
    ids = _ids(PAGE * 2 + 5)
    _commit(repo, [_status(r) for r in ids])
    _commit(repo, [_status("20250201-000000-00000000ff")])  # January is over: all its parts have pages
    git(repo.root, "rm", "-q", f"status/a/{ids[3]}.json", f"runs/a/{ids[3]}.yaml")  # taken out of the lab
    git(repo.root, "commit", "-q", "-m", "remove a run")
    batch = Batch(repo)
    batch.changed_by_others("a", [ids[3]])  # what the bot does once its scan finds the removal
    batch.render([], [])
    batch.commit("tp bot: test")

    shown = []
    for name in ("2025-01.md", "2025-01-p2.md", "2025-01-p3.md"):
        shown += re.findall(r"`(\d{8}-\d{6}-[0-9a-f]+)`", (repo.root / "status/a" / name).read_text())
    assert sorted(shown) == sorted(set(ids) - {ids[3]})  # each run on exactly one part
    assert broken_links(repo.root) == []
