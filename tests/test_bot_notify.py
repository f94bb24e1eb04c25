"""Notifications: a real HTTP receiver on 127.0.0.1, real bots (processes racing on one remote, and in
process), the local backend. One message per run per phase change however the bots race; a bot killed
between sending and recording repeats that one message once, with the same idempotency key; a webhook
that fails or hangs costs the bot's run its time limit and loses nothing."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.repos import BRANCH, clone, git, make_remote, quiet, remote_show, run_ids, seed_lab, tp_process
from support.wait import wait_until

from tuneplane.bot.entry import BotOptions, reconcile
from tuneplane.bot.report import CRASH_ENV, CRASH_EXIT
from tuneplane.errors import UsageError
from tuneplane.lab.load import load_lab

HOOK_ENV = "TP_TEST_WEBHOOK"
ALL_PHASES = "[Submitted, Pending, Running, Succeeded, Failed, Cancelled]"


class Receiver:
    """A webhook: records each POST (its idempotency key and body); answers 200, 500, or hangs."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.got: list[dict[str, Any]] = []
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server calls it by this name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.got.append({"key": self.headers["Idempotency-Key"], **body})
                if receiver.mode == "hang":
                    receiver.release.wait(60)
                code = 500 if receiver.mode == "fail" else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()

    def per_transition(self) -> Counter[tuple[str, str]]:
        return Counter((m["run"], m["phase"]) for m in self.got)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver()
    yield hook
    hook.close()


def notify_lab(tmp_path: Path, count: int, timeout: float = 5) -> tuple[Path, list[str]]:
    """A lab on the local backend with a webhook for every phase, `count` requests, pushed to a remote."""
    remote = make_remote(tmp_path)
    ids = run_ids(count)
    seed = seed_lab(remote, tmp_path / "seed", runs=[("demo", r) for r in ids])
    settings = seed / "tuneplane.yaml"
    settings.write_text(
        settings.read_text() + f"notify:\n  webhooks:\n    - url_env: {HOOK_ENV}\n"
        f"      phases: {ALL_PHASES}\n      timeout_seconds: {timeout}\n      retries: 1\n"
    )
    load_lab(seed).require_settings()  # the settings are valid
    git(seed, "commit", "-qam", "notify on every phase")
    git(seed, "push", "-q", "origin", f"HEAD:{BRANCH}")
    return remote, ids


def race(clones: list[Path], verb: str, env: dict[str, str]) -> list[tuple[int, str]]:
    procs = [tp_process(root, "bot", verb, "--push", env=env) for root in clones]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=180)
        out.append((proc.returncode, stdout + stderr))
    return out


def remote_phase(remote: Path, run_id: str) -> str:
    return str(json.loads(remote_show(remote, f"status/demo/{run_id}.json"))["phase"])


def test_racing_bots_send_one_message_per_run_per_phase_change(tmp_path: Path, receiver: Receiver) -> None:
    remote, ids = notify_lab(tmp_path, 4)
    clones = [clone(remote, tmp_path / f"bot{i}") for i in range(3)]
    env = {HOOK_ENV: receiver.url}

    results = race(clones, "reconcile", env)

    def phases() -> dict[str, str]:
        return {r: remote_phase(remote, r) for r in ids}

    def all_succeeded() -> bool:
        """Whether every run has Succeeded on the remote; when not, the bots race one more sync (no pause)."""
        if set(phases().values()) == {"Succeeded"}:
            return True
        results.extend(race(clones, "sync", env))
        return False

    def never() -> str:
        return f"the runs never all Succeeded: {phases()}\n" + "\n".join(out for code, out in results if code)

    wait_until(all_succeeded, 120, 0, never)
    assert all(code == 0 for code, _ in results), "\n".join(out for _, out in results)

    counts = receiver.per_transition()
    assert counts and max(counts.values()) == 1, counts  # never twice, however the bots raced
    for run_id in ids:  # and nothing lost: the first status and the end of every run were announced
        assert counts[(f"demo/{run_id}", "Submitted")] == 1
        assert counts[(f"demo/{run_id}", "Succeeded")] == 1
    keys = [m["key"] for m in receiver.got]
    assert len(set(keys)) == len(keys)
    # each announced change is one the branch's history shows: the previous phase is the one before it
    for message in receiver.got:
        assert message["previous_phase"] != message["phase"]
        assert message["idempotency_key"] == message["key"]


@pytest.mark.parametrize("step", ["notified", "pushed"])
def test_a_bot_killed_around_sending_repeats_at_most_one_message_with_the_same_key(
    tmp_path: Path, receiver: Receiver, step: str
) -> None:
    remote, ids = notify_lab(tmp_path, 2)
    bot = clone(remote, tmp_path / "bot")
    env = {HOOK_ENV: receiver.url}

    proc = tp_process(bot, "bot", "reconcile", "--push", env={**env, CRASH_ENV: step})
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == CRASH_EXIT, stdout + stderr
    assert len(receiver.got) == (1 if step == "notified" else 0)
    assert {remote_phase(remote, r) for r in ids} == {"Submitted"}  # pushed before anything was sent

    proc = tp_process(bot, "bot", "reconcile", "--push", env=env)  # nothing new to submit: it still sends
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout + stderr

    counts = Counter(m["key"] for m in receiver.got)
    submitted = {m["run"] for m in receiver.got if m["phase"] == "Submitted"}
    assert submitted == {f"demo/{r}" for r in ids}  # nothing lost
    repeats = [key for key, n in counts.items() if n > 1]
    assert len(repeats) == (1 if step == "notified" else 0) and max(counts.values()) <= 2
    if repeats:  # the repeat is the message sent just before the kill, byte for byte the same transition
        first, again = [m for m in receiver.got if m["key"] == repeats[0]]
        assert first == again


@pytest.mark.parametrize("mode", ["fail", "hang"])
def test_a_failing_or_hanging_webhook_costs_its_time_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    remote, ids = notify_lab(tmp_path, 2, timeout=1)
    bot = clone(remote, tmp_path / "bot")
    hook = Receiver(mode)
    monkeypatch.setenv(HOOK_ENV, hook.url)
    said: list[str] = []
    try:
        report = reconcile(bot, BotOptions(push=True), echo=said.append)
        # the pass ended while the webhook was still failing or holding its first request open
        assert not hook.release.is_set() and hook.got
    finally:
        hook.close()
    assert report.pushed and sorted(report.submitted) == [f"demo/{r}" for r in ids]
    assert {remote_phase(remote, r) for r in ids} == {"Submitted"}  # every status committed and pushed
    assert any("not delivered" in line for line in said), said

    healthy = Receiver()  # the webhook is back: the next run delivers what was kept
    monkeypatch.setenv(HOOK_ENV, healthy.url)
    try:
        reconcile(bot, BotOptions(push=True), echo=quiet)
    finally:
        healthy.close()
    assert sorted(m["run"] for m in healthy.got if m["phase"] == "Submitted") == [f"demo/{r}" for r in ids]


def test_a_webhook_url_is_never_written_in_the_lab(tmp_path: Path) -> None:
    remote, _ = notify_lab(tmp_path, 1)
    lab = clone(remote, tmp_path / "lab")
    settings = lab / "tuneplane.yaml"
    settings.write_text(settings.read_text().replace(f"url_env: {HOOK_ENV}", "url: https://hooks.example.org/x"))
    with pytest.raises(UsageError) as caught:
        load_lab(lab).require_settings()
    assert "url" in str(caught.value) and "tuneplane.yaml" in str(caught.value)


def test_a_phase_change_is_read_from_statuses_unchecked(tmp_path: Path) -> None:
    """The pass's commit as the branch holds it: a valid status's change is one message; a status that
    says no phase, or says it in another type, is no change to tell, and nothing fails."""
    from tuneplane.bot.notify import TRAILER, Change, owned_changes
    from tuneplane.lab.gitrepo import GitRepo

    runs = ("20250101-000000-000001", "20250101-000000-000002", "20250101-000000-000003")
    folder = tmp_path / "status" / "demo"
    folder.mkdir(parents=True)
    git(tmp_path, "init", "-q", "-b", BRANCH)
    for run_id in runs:
        (folder / f"{run_id}.json").write_text(json.dumps({"phase": "Running"}), encoding="utf-8")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "running")
    ended = {"phase": "Failed", "message": "boom", "history": [{"phase": "Failed", "at": "t1"}, "junk"]}
    for run_id, status in zip(runs, (ended, {"phase": ["Failed"]}, {"message": "no phase at all"}), strict=True):
        (folder / f"{run_id}.json").write_text(json.dumps(status), encoding="utf-8")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", f"the pass\n\n{TRAILER}: p1")

    changes = owned_changes(GitRepo(tmp_path), "p1")

    assert changes == [Change("demo", runs[0], "Running", "Failed", "t1", "boom")]
