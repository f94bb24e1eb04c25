"""Rule `status-owned`: `tp validate --changed` refuses a pull request that writes a bot run's status.

A real lab, the real bot against the cluster twin pushing to a bare remote, then a pull request's
clone and the real `tp validate --changed` in a process.
"""

from __future__ import annotations

import json
from pathlib import Path

from fakekube import FakeKube
from support.repos import BRANCH, backend_factory, clone, git, make_remote, quiet, request, run_ids, seed_lab, tp_run

from tuneplane.bot.entry import BotOptions, reconcile
from tuneplane.lab.runs import RunKey, write_request

pytest_plugins = ("fakekube",)

NEW = "20250103-100000-0000aa"


def _pr(tmp_path: Path, fake_kube: FakeKube) -> tuple[Path, RunKey]:
    remote = make_remote(tmp_path)
    ids = run_ids(1)
    seed_lab(
        remote,
        tmp_path / "seed",
        {"demo": "echo hi\n"},
        backend="kubernetes",
        runs=[("demo", r) for r in ids],
        profile="h200:8",
    )
    bot = clone(remote, tmp_path / "bot")
    reconcile(bot, BotOptions(push=True), backends=backend_factory(fake_kube), echo=quiet)
    pr = clone(remote, tmp_path / "pr")
    git(pr, "checkout", "-q", "-b", "feature")
    return pr, RunKey("demo", ids[0])


def _validate(root: Path) -> tuple[int, str]:
    return tp_run(root, "validate", "--changed", "--base", f"origin/{BRANCH}")


def test_editing_a_bot_runs_status_is_refused_with_its_line(tmp_path: Path, fake_kube: FakeKube) -> None:
    pr, key = _pr(tmp_path, fake_kube)
    path = pr / key.status_rel
    data = json.loads(path.read_text())
    data["phase"] = "Succeeded"
    path.write_text(json.dumps(data, indent=2) + "\n")
    git(pr, "commit", "-qam", "it worked, trust me")

    code, out = _validate(pr)

    assert code == 1, out
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith('  "phase"'))
    assert f"{key.status_rel}:{line}:" in out and "status-owned" in out, out


def test_a_new_status_naming_a_cluster_object_is_refused(tmp_path: Path, fake_kube: FakeKube) -> None:
    pr, victim = _pr(tmp_path, fake_kube)
    write_request(pr, request("demo", NEW, "h200:8"))
    forged = {**json.loads((pr / victim.status_rel).read_text()), "run_id": NEW}
    (pr / f"status/demo/{NEW}.json").write_text(json.dumps(forged, indent=2) + "\n")
    git(pr, "add", "-A")
    git(pr, "commit", "-qm", "my run")

    code, out = _validate(pr)

    assert code == 1 and f"status/demo/{NEW}.json" in out and "status-owned" in out, out


def test_a_local_runs_own_status_and_notes_stay_allowed(tmp_path: Path, fake_kube: FakeKube) -> None:
    pr, victim = _pr(tmp_path, fake_kube)
    write_request(pr, request("demo", NEW, "local"))
    local = {
        **json.loads((pr / victim.status_rel).read_text()),
        "run_id": NEW,
        "backend": {
            "backend": "local",
            "kind": "Process",
            "name": "demo-x",
            "namespace": str(tmp_path / "r"),
            "uid": "u",
        },
    }
    (pr / f"status/demo/{NEW}.json").write_text(json.dumps(local, indent=2) + "\n")
    (pr / "status/demo/NOTES.md").write_text("the baseline is run 0\n")
    git(pr, "add", "-A")
    git(pr, "commit", "-qm", "tp submit --local")

    code, out = _validate(pr)

    assert "status-owned" not in out, out
