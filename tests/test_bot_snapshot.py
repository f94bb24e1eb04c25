"""The bot acts only on what is committed, never writes through a symlink, and trusts the cluster.

Each case is an attack or an accident that once made `tp bot` act on something git does not hold: a
committed symlink for `status/` or `runs/<exp>`, an untracked request or an uncommitted `cancel: true`
in the bot's work tree, a status hand-edited to `Succeeded` while the job still runs, one request so
deeply nested that parsing it blew the stack. Every test runs `tp bot` against real git and the fake API
server: in this process (`tp_here`), but for the nested request, whose parse once crashed the process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fakekube import FakeKube
from support.repos import (
    git,
    kube_lab,
    kubeconfig,
    request,
    tp_here,
    tp_run,
)

NS = "tuneplane"

pytest_plugins = ("fakekube",)  # the fake_kube fixture


def _lab(tmp_path: Path, fake: FakeKube, count: int = 2) -> tuple[Path, list[str], Path]:
    bot, ids = kube_lab(tmp_path, count)
    return bot, ids, kubeconfig(tmp_path / "kubeconfig", fake.url)


def _bot(root: Path, config: Path, verb: str = "reconcile") -> tuple[int, str]:
    return tp_here(root, "bot", verb, "--kubeconfig", str(config))


def _bot_process(root: Path, config: Path) -> tuple[int, str]:
    return tp_run(root, "bot", "reconcile", "--kubeconfig", str(config), timeout=120)


def _jobs(fake: FakeKube) -> set[str]:
    return {name for (kind, _, name), n in fake.creations.items() if kind == "Job" and n}


def _live(fake: FakeKube) -> set[str]:
    return {obj["metadata"]["name"] for obj in fake.list("Job", NS)}


def _status(root: Path, run_id: str, exp: str = "demo") -> dict:
    return json.loads(git(root, "show", f"HEAD:status/{exp}/{run_id}.json"))


def _write_request(root: Path, exp: str, run_id: str, **fields: object) -> Path:
    from tuneplane.lab.runs import write_request

    return write_request(root, request(exp, run_id, "h200:8", **fields))


# ── committed symlinks ───────────────────────────────────────────────────────────────────────────


def test_a_committed_status_symlink_never_makes_the_bot_write_outside(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids, config = _lab(tmp_path, fake_kube)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "README.md").write_text("precious\n")
    git(bot, "rm", "-rq", "--ignore-unmatch", "status")
    if (bot / "status").exists():
        import shutil

        shutil.rmtree(bot / "status")
    os.symlink(elsewhere, bot / "status")
    git(bot, "add", "status")
    git(bot, "commit", "-q", "-m", "status is elsewhere")

    code, out = _bot(bot, config)

    assert (elsewhere / "README.md").read_text() == "precious\n"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["README.md"]
    assert code != 0 and "status" in out and "symbolic link" in out, out
    assert "Traceback" not in out
    assert not _jobs(fake_kube), "nothing may be submitted while its status cannot be recorded"


def test_a_status_experiment_dir_linked_outside_is_never_written_through(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids, config = _lab(tmp_path, fake_kube, count=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (bot / "status").mkdir(exist_ok=True)
    os.symlink(elsewhere, bot / "status" / "demo")
    git(bot, "add", "status/demo")
    git(bot, "commit", "-q", "-m", "status/demo is elsewhere")

    code, out = _bot(bot, config)

    assert list(elsewhere.iterdir()) == [], out
    assert "status/demo" in out and "symbolic link" in out, out
    assert "Traceback" not in out and code != 0


def test_runs_linked_outside_are_not_submitted_and_the_rest_are(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids, config = _lab(tmp_path, fake_kube, count=1)
    outside = tmp_path / "outside" / "sneaky"
    outside.mkdir(parents=True)
    from tuneplane.lab.runs import dump_request

    sneaky = request("sneaky", "20250103-000000-0000aa", "h200:8")
    (outside / "20250103-000000-0000aa.yaml").write_text(dump_request(sneaky))
    os.symlink(outside, bot / "runs" / "sneaky")
    # and one request file that is itself a link to a file outside
    linked = request("demo", "20250103-000000-0000bb", "h200:8")
    (tmp_path / "outside" / "one.yaml").write_text(dump_request(linked))
    os.symlink(tmp_path / "outside" / "one.yaml", bot / "runs" / "demo" / "20250103-000000-0000bb.yaml")
    git(bot, "add", "runs")
    git(bot, "commit", "-q", "-m", "requests that live outside the repository")

    code, out = _bot(bot, config)

    assert "Traceback" not in out
    submitted = {json.loads(git(bot, "show", f"HEAD:status/demo/{r}.json"))["run_id"] for r in ids}
    assert submitted == set(ids), out
    assert len(_jobs(fake_kube)) == 1, out  # only the regular, committed request
    assert "runs/sneaky" in out and "symbolic link" in out, out
    assert "20250103-000000-0000bb" in out, out
    files = git(bot, "ls-tree", "-r", "--name-only", "HEAD", "--", "status").splitlines()
    assert not any("sneaky" in f and f.endswith(".json") for f in files)
    linked_status = _status(bot, "20250103-000000-0000bb")
    assert linked_status["phase"] == "Failed" and "symbolic link" in linked_status["message"]
    dashboard = git(bot, "show", "HEAD:status/README.md")
    assert "runs/sneaky" in dashboard


# ── only what is committed ───────────────────────────────────────────────────────────────────────


def test_an_untracked_request_is_not_submitted(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids, config = _lab(tmp_path, fake_kube, count=1)
    _write_request(bot, "demo", "20250104-000000-0000cc")  # in the work tree, never committed

    code, out = _bot(bot, config)

    assert code == 0, out
    assert len(_jobs(fake_kube)) == 1
    files = git(bot, "ls-tree", "-r", "--name-only", "HEAD", "--", "status").splitlines()
    assert "status/demo/20250104-000000-0000cc.json" not in files
    assert not (bot / "status/demo/20250104-000000-0000cc.json").exists()


def test_an_uncommitted_cancel_does_not_delete_the_job(tmp_path: Path, fake_kube: FakeKube) -> None:
    from tuneplane.lab.runs import RunKey, mark_cancel

    bot, ids, config = _lab(tmp_path, fake_kube, count=1)
    assert _bot(bot, config)[0] == 0
    name = _status(bot, ids[0])["backend"]["name"]
    mark_cancel(bot, RunKey("demo", ids[0]))  # edited, not committed

    code, out = _bot(bot, config)

    assert code == 0, out
    assert name in _live(fake_kube), out
    assert _status(bot, ids[0])["phase"] == "Submitted"

    git(bot, "commit", "-q", "-am", "cancel it for real")
    assert _bot(bot, config)[0] == 0
    assert name not in _live(fake_kube)
    assert _status(bot, ids[0])["phase"] == "Cancelled"


def test_a_request_edited_in_the_work_tree_runs_as_committed(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids, config = _lab(tmp_path, fake_kube, count=1)
    path = bot / "runs" / "demo" / f"{ids[0]}.yaml"
    path.write_text(path.read_text().replace("profile: h200:8", "profile: h200:4"))

    code, out = _bot(bot, config)

    assert code == 0, out
    assert _status(bot, ids[0])["profile"] == "h200:8"


# ── the cluster is the truth ─────────────────────────────────────────────────────────────────────


def _hand_edit_succeeded(bot: Path, run_id: str) -> None:
    path = bot / "status" / "demo" / f"{run_id}.json"
    data = json.loads(path.read_text())
    data.update(phase="Succeeded", finished_at="2025-01-02T12:00:00Z", exit_code=0)
    data["history"].append({"phase": "Succeeded", "at": "2025-01-02T12:00:00Z"})
    path.write_text(json.dumps(data, indent=2) + "\n")
    git(bot, "commit", "-q", "-am", "it is done (it is not)")


def test_sync_corrects_a_status_that_claims_an_end_while_the_job_runs(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids, config = _lab(tmp_path, fake_kube, count=1)
    assert _bot(bot, config)[0] == 0
    name = _status(bot, ids[0])["backend"]["name"]
    labels = fake_kube.get("Job", NS, name)["spec"]["template"]["metadata"]["labels"]
    fake_kube.add_pod(NS, f"{name}-x", labels, "Running", start_time="2025-01-02T10:01:00Z")
    _hand_edit_succeeded(bot, ids[0])

    code, out = _bot(bot, config, "sync")

    assert code == 0, out
    fixed = _status(bot, ids[0])
    assert fixed["phase"] == "Running", out
    # the bot went by its own record of the run (the edit is put back, and said so), then the cluster
    assert "changed outside the bot" in out and "restored" in out, out
    assert fixed.get("finished_at") in (None, "")

    # and now `tp job cancel` works, and the bot deletes the job
    code, out = tp_run(bot, "job", "cancel", ids[0])
    assert code == 0, out
    assert _bot(bot, config)[0] == 0
    assert name not in _live(fake_kube)
    assert _status(bot, ids[0])["phase"] == "Cancelled"


def test_cancel_true_deletes_the_job_even_when_the_status_says_it_ended(tmp_path: Path, fake_kube: FakeKube) -> None:
    from tuneplane.lab.runs import RunKey, mark_cancel

    bot, ids, config = _lab(tmp_path, fake_kube, count=1)
    assert _bot(bot, config)[0] == 0
    name = _status(bot, ids[0])["backend"]["name"]
    _hand_edit_succeeded(bot, ids[0])
    mark_cancel(bot, RunKey("demo", ids[0]))
    git(bot, "commit", "-q", "-am", "cancel it")

    code, out = _bot(bot, config)

    assert code == 0, out
    assert name not in _live(fake_kube), out
    assert _status(bot, ids[0])["phase"] == "Cancelled"


# ── one bad request is one bad request ───────────────────────────────────────────────────────────


def test_one_deeply_nested_request_is_reported_and_the_others_run(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids, config = _lab(tmp_path, fake_kube, count=2)
    bad = "20250105-000000-0000dd"
    deep = "set:\n  x: " + "[" * 900 + "]" * 900 + "\n"
    (bot / "runs" / "demo" / f"{bad}.yaml").write_text(f"experiment: demo\nrun_id: {bad}\nprofile: h200:8\n{deep}")
    nested_map = "".join("  " * i + f"k{i}:\n" for i in range(900)) + "  " * 900 + "v: 1\n"
    worse = "20250105-000000-0000ee"
    (bot / "runs" / "demo" / f"{worse}.yaml").write_text(
        f"experiment: demo\nrun_id: {worse}\nprofile: h200:8\nset:\n"
        + "\n".join("  " + line for line in nested_map.splitlines())
        + "\n"
    )
    git(bot, "add", "-A")
    git(bot, "commit", "-q", "-m", "two requests nobody can parse")

    code, out = _bot_process(bot, config)  # a process: the parse once blew the stack

    assert "Traceback" not in out and "RecursionError" not in out, out
    assert len(_jobs(fake_kube)) == 2, out
    for run_id in (bad, worse):
        assert run_id in out, out
        status = _status(bot, run_id)
        assert status["phase"] == "Failed" and status["reason"] == "InvalidRequest", status
        assert f"runs/demo/{run_id}.yaml" in status["message"]
    dashboard = git(bot, "show", "HEAD:status/README.md") + "".join(
        git(bot, "show", f"HEAD:{p}")
        for p in git(bot, "ls-tree", "-r", "--name-only", "HEAD", "--", "status").splitlines()
        if p.endswith(".md")
    )
    assert bad in dashboard and "InvalidRequest" in dashboard


# ── a lab that stays small: the bot reads only what changed ──────────────────────────────────────


def test_a_no_op_run_reads_no_finished_status_and_a_foreign_edit_only_its_file(
    tmp_path: Path, fake_kube: FakeKube, monkeypatch
) -> None:
    from support.repos import backend_factory, quiet

    from tuneplane.bot.entry import reconcile, sync
    from tuneplane.bot.snapshot import Snapshot

    bot, ids, _config = _lab(tmp_path, fake_kube, count=6)
    reconcile(bot, backends=backend_factory(fake_kube), echo=quiet)
    for run_id in ids:  # every job ends; sync records it and stops watching them
        name = _status(bot, run_id)["backend"]["name"]
        fake_kube.set_status(
            "Job",
            NS,
            name,
            {
                "startTime": "2025-01-01T00:00:00Z",
                "completionTime": "2025-01-01T00:05:00Z",
                "conditions": [{"type": "Complete", "status": "True"}],
            },
        )
    sync(bot, backends=backend_factory(fake_kube), echo=quiet)
    assert json.loads(git(bot, "show", "HEAD:status/index.json"))["active"] == {}
    read: list[str] = []
    original = Snapshot.blobs

    def spy(self, oids, limit=1 << 20):  # type: ignore[no-untyped-def]
        oids = list(oids)
        read.extend(oids)
        return original(self, oids, limit)

    monkeypatch.setattr(Snapshot, "blobs", spy)
    status_blobs = {git(bot, "rev-parse", f"HEAD:status/demo/{r}.json"): r for r in ids}

    for step in (reconcile, sync):
        before = git(bot, "rev-parse", "HEAD")
        report = step(bot, backends=backend_factory(fake_kube), echo=quiet)
        assert report.commit is None and git(bot, "rev-parse", "HEAD") == before
    assert not set(read) & set(status_blobs), "a no-op run read finished status files"

    path = bot / "status" / "demo" / f"{ids[2]}.json"
    data = json.loads(path.read_text())
    data["message"] = "edited by hand"
    path.write_text(json.dumps(data, indent=2) + "\n")
    git(bot, "commit", "-q", "-am", "a hand edit of one finished status")
    edited = git(bot, "rev-parse", f"HEAD:status/demo/{ids[2]}.json")
    read.clear()
    sync(bot, backends=backend_factory(fake_kube), echo=quiet)
    assert set(read) & ({edited} | set(status_blobs)) == {edited}


def test_the_dashboard_lists_requests_not_yet_run(tmp_path: Path, fake_kube: FakeKube) -> None:
    bot, ids, config = _lab(tmp_path, fake_kube, count=2)

    code, out = _bot(bot, config, "sync")  # sync submits nothing: the requests wait for reconcile

    assert code == 0, out
    index = git(bot, "show", "HEAD:status/README.md")
    assert "Waiting for the bot" in index and all(f"`{r}`" in index for r in ids)
    assert _bot(bot, config)[0] == 0
    assert "Waiting for the bot" not in git(bot, "show", "HEAD:status/README.md")
