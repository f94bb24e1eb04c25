"""Several `tp bot reconcile --push` processes at once, each in its own clone of one bare remote.

What must hold however they interleave: every run is submitted exactly once (counted by the fake API
server, and by the local backend's launches), every run ends up with a status file on the remote,
and no bot loses another's commit.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from fakekube import FakeKube
from support.repos import (
    BRANCH,
    add_requests,
    clone,
    git,
    kubeconfig,
    make_remote,
    remote_files,
    remote_show,
    run_ids,
    seed_lab,
    tp_process,
)
from support.wait import until

from tuneplane.plan.names import object_name

pytest_plugins = ("fakekube",)  # the fake_kube fixture


def _race(clones: list[Path], *args: str, env: dict[str, str] | None = None) -> list[tuple[int, str]]:
    procs = [tp_process(root, "bot", "reconcile", "--push", *args, env=env) for root in clones]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        results.append((proc.returncode, out + err))
    return results


def _assert_converged(remote: Path, clones: list[Path], keys: list[tuple[str, str]]) -> dict[str, dict]:
    statuses = {}
    for exp, run_id in keys:
        rel = f"status/{exp}/{run_id}.json"
        assert rel in remote_files(remote, "status"), f"{rel} missing on the remote"
        statuses[run_id] = json.loads(remote_show(remote, rel))
    head = git(remote, "rev-parse", BRANCH)
    for root in clones:  # every bot's work reached the remote: nothing left only in a clone
        git(root, "fetch", "-q", "origin")
        git(root, "merge-base", "--is-ancestor", "HEAD", f"origin/{BRANCH}")  # raises when not
        assert git(root, "status", "--porcelain") == ""
    index = remote_show(remote, "status/README.md")  # the dashboard: an index, a page per experiment and month
    assert all(f"({exp}/README.md)" in index for exp, _ in keys)
    for exp, run_id in keys:  # each run is on its month's page: the experiment page for the newest month
        newest = max(r for e, r in keys if e == exp)[:6]
        page = "README" if run_id[:6] == newest else f"{run_id[:4]}-{run_id[4:6]}"
        assert f"`{run_id}`" in remote_show(remote, f"status/{exp}/{page}.md")
    assert git(remote, "log", "--format=%H", BRANCH).count("\n") + 1 >= 3  # seed, requests, bot commits
    assert head
    return statuses


def test_concurrent_bots_submit_each_run_once_to_the_cluster(tmp_path: Path, fake_kube: FakeKube) -> None:
    remote = make_remote(tmp_path)
    keys = [("alpha", r) for r in run_ids(12)] + [("beta", r) for r in run_ids(12, day="20250103")]
    seed_lab(
        remote,
        tmp_path / "seed",
        {"alpha": "echo a\n", "beta": "echo b\n"},
        backend="kubernetes",
        runs=keys,
        profile="h200:8",
    )
    clones = [clone(remote, tmp_path / f"bot{i}") for i in range(4)]
    config = kubeconfig(tmp_path / "kubeconfig", fake_kube.url)

    results = _race(clones, "--kubeconfig", str(config))
    print("\n".join(out for _, out in results))

    assert [code for code, _ in results] == [0] * len(clones), "\n".join(out for _, out in results)
    jobs = {name: n for (kind, _, name), n in fake_kube.creations.items() if kind == "Job"}
    assert jobs == {object_name(exp, run_id): 1 for exp, run_id in keys}
    statuses = _assert_converged(remote, clones, keys)
    for exp, run_id in keys:
        status = statuses[run_id]
        assert status["phase"] == "Submitted"
        stored = fake_kube.get("Job", "tuneplane", object_name(exp, run_id))
        assert status["backend"]["uid"] == stored["metadata"]["uid"]
    # a second round finds nothing to do and creates nothing
    results = _race(clones[:2], "--kubeconfig", str(config))
    assert [code for code, _ in results] == [0, 0]
    assert sum(n for (kind, _, _), n in fake_kube.creations.items() if kind == "Job") == len(keys)


def test_concurrent_bots_launch_each_local_run_once(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    keys = [("demo", r) for r in run_ids(20)]
    seed = seed_lab(remote, tmp_path / "seed", runs=keys[:10])
    clones = [clone(remote, tmp_path / f"bot{i}") for i in range(3)]
    counter = tmp_path / "launches.txt"
    env = {"LAUNCH_COUNTER": str(counter)}

    first = _race(clones, env=env)
    git(seed, "pull", "-q", "--rebase", "origin", BRANCH)
    add_requests(seed, keys[10:])  # more requests merge while the first jobs run
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    second = _race(clones, env=env)

    assert [code for code, _ in first + second] == [0] * 6, "\n".join(out for _, out in first + second)
    _assert_converged(remote, clones, keys)
    until(lambda: _lines(counter), lambda seen: len(seen) >= len(keys), 60, "not every run was launched", every=0.2)
    time.sleep(0.5)  # a duplicate launch would show up here
    launches = _lines(counter)
    assert sorted(launches) == sorted(run_id for _, run_id in keys)


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []
