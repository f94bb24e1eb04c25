"""A branch rewritten on the remote (a force push) under a bot clone that is kept between runs.

A self-hosted runner keeps its checkout; when people rewrite the lab's branch (to drop a file that must
not be there, to squash), the bot's next run must replay only its own unpublished commits onto the new
history, never the commits the rewrite removed. Real git, a bare remote, real `tp bot` processes.
"""

from __future__ import annotations

import os
from pathlib import Path

from support.repos import BRANCH, add_requests, clone, git, make_remote, seed_lab, tp_run


def test_a_force_pushed_rewrite_is_not_undone_by_a_kept_bot_clone(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    people = seed_lab(remote, tmp_path / "people", {"demo": "echo hi\n"}, runs=[("demo", "20250102-100000-00000a")])
    (people / "secret.txt").write_text("a token that must not be in the lab\n")
    git(people, "add", "secret.txt")
    git(people, "commit", "-q", "-m", "oops")
    git(people, "push", "-q", "origin", f"HEAD:{BRANCH}")
    bot = clone(remote, tmp_path / "bot")
    env = {"TUNEPLANE_STORAGE_ROOT": os.environ["TUNEPLANE_STORAGE_ROOT"]}
    code, out = tp_run(bot, "bot", "reconcile", "--push", env=env)
    assert code == 0, out

    git(people, "pull", "-q", "--rebase", "origin", BRANCH)
    git(people, "rm", "-q", "secret.txt")
    first = git(people, "rev-list", "--max-parents=0", "HEAD")
    git(people, "reset", "-q", "--soft", first)
    git(people, "commit", "-q", "-m", "the lab, squashed, without the secret")
    add_requests(people, [("demo", "20250103-100000-00000b")])
    git(people, "push", "-q", "-f", "origin", f"HEAD:{BRANCH}")
    rewritten = git(people, "rev-parse", "HEAD")

    code, out = tp_run(bot, "bot", "reconcile", "--push", env=env)

    assert code == 0, out
    assert "demo/20250103-100000-00000b: submitted" in out
    assert "secret.txt" not in git(remote, "ls-tree", "-r", "--name-only", BRANCH).split()
    assert git(remote, "rev-parse", f"{BRANCH}~1") == rewritten  # the bot's one commit on top of the rewrite
    touched = git(remote, "diff", "--name-only", rewritten, BRANCH).splitlines()
    assert touched and all(path.startswith("status/") for path in touched), touched
