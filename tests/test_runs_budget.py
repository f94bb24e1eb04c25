"""GPU-hours in the plan, budgets at the gate (`runs.budget`).

A real lab in git, bot-written statuses on its default branch carrying attempts and their GPU-seconds,
then a pull request's branch adding run requests; `tp validate --changed` and `tp render --changed
--diff` run as processes, as the lab's workflow runs them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.repos import BRANCH, git, make_remote, request, seed_lab, tp_here

from tuneplane.lab.load import load_lab
from tuneplane.lab.runs import RunKey, write_request, write_status
from tuneplane.models.run import Attempt, BackendObject, RunStatus, SubmittedFor
from tuneplane.runs.budget import AUTHOR_ENV, by_person, estimate, spent, statuses_in

NOW = datetime.now(UTC)
THIS_MONTH = NOW.strftime("%Y%m")
LAST_MONTH = (NOW.replace(day=1) - timedelta(days=1)).strftime("%Y%m")


def _id(month: str, n: int) -> str:
    return f"{month}01-00{n:04d}-{n:06x}"


def _started(month: str) -> str:
    return f"{month[:4]}-{month[4:]}-01T00:00:00Z"


def _status(exp: str, run_id: str, profile: str, *hours: float) -> RunStatus:
    """A finished run as the bot records it: one attempt per GPU-hours value, started in the run's month."""
    month = run_id[:6]
    attempts = [
        Attempt(number=n, started_at=_started(month), reason="Completed", gpus=1, gpu_seconds=h * 3600)
        for n, h in enumerate(hours, 1)
    ]
    return RunStatus(
        experiment=exp,
        run_id=run_id,
        profile=profile,
        phase="Succeeded",
        backend=BackendObject(backend="kubernetes", kind="Job", name=f"{exp}-{run_id}"),
        attempts=attempts,
    )


def _lab(tmp_path: Path, budgets: str, statuses: list[RunStatus]) -> Path:
    """The default branch: a Kubernetes lab with `budgets`, its statuses; then a pull request's branch."""
    remote = make_remote(tmp_path)
    lab = seed_lab(remote, tmp_path / "lab", {"demo": "echo hi\n", "other": "echo hi\n"}, backend="kubernetes")
    with (lab / "tuneplane.yaml").open("a", encoding="utf-8") as fh:
        fh.write(budgets)
    for status in statuses:
        write_request(lab, request(status.experiment, status.run_id, status.profile))
        write_status(lab, status)
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "budgets and what the bot ran")
    git(lab, "push", "-q", "origin", f"HEAD:{BRANCH}")
    git(lab, "checkout", "-q", "-b", "feature")
    return lab


def _propose(lab: Path, *requests: tuple[str, str, int | None]) -> list[str]:
    """Commit new run requests (experiment, profile, timeout seconds) on the pull request's branch."""
    rels = []
    for n, (exp, profile, timeout) in enumerate(requests, 900):
        path = write_request(lab, request(exp, _id(THIS_MONTH, n), profile, timeout=timeout))
        rels.append(path.relative_to(lab).as_posix())
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "more runs")
    return rels


def _validate(lab: Path) -> tuple[int, str]:
    return tp_here(lab, "validate", "--changed", "--base", f"origin/{BRANCH}")


MONTHLY_10 = "\nbudgets:\n  monthly_gpu_hours: 10\n"


def test_a_change_over_the_monthly_budget_fails_with_the_numbers(tmp_path: Path) -> None:
    lab = _lab(tmp_path, MONTHLY_10, [_status("demo", _id(THIS_MONTH, 1), "h200:1", 5, 4)])
    (rel,) = _propose(lab, ("demo", "h200:1", 2 * 3600))

    code, out = _validate(lab)

    assert code == 1, out
    assert "budget-exceeded" in out and rel in out, out
    month = NOW.strftime("%Y-%m")
    assert f"9.00 GPU-hours spent in {month} + 2.00 estimated for this change = 11.00" in out, out
    assert "budgets.monthly_gpu_hours 10" in out and "tuneplane.yaml" in out, out


def test_a_status_written_beside_a_new_request_does_not_take_it_out_of_the_budget(tmp_path: Path) -> None:
    """Whether a run already ran is the base's word: a pull request cannot exempt its own request from
    the gate by adding a status for it."""
    lab = _lab(tmp_path, MONTHLY_10, [_status("demo", _id(THIS_MONTH, 1), "h200:1", 9)])
    (rel,) = _propose(lab, ("demo", "h200:1", 2 * 3600))
    run_id = rel.rsplit("/", 1)[1].rsplit(".", 1)[0]
    write_status(lab, _status("demo", run_id, "h200:1", 0.1))
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "a status of our own")

    code, out = _validate(lab)

    assert code == 1 and "budget-exceeded" in out and rel in out, out


def test_a_change_within_the_budget_passes(tmp_path: Path) -> None:
    lab = _lab(tmp_path, MONTHLY_10, [_status("demo", _id(THIS_MONTH, 1), "h200:1", 7)])
    _propose(lab, ("demo", "h200:1", 2 * 3600))

    code, out = _validate(lab)

    assert code == 0 and "budget-" not in out, out


def test_last_months_spending_is_not_counted(tmp_path: Path) -> None:
    lab = _lab(tmp_path, MONTHLY_10, [_status("demo", _id(LAST_MONTH, 1), "h200:1", 9)])
    _propose(lab, ("demo", "h200:1", 2 * 3600))

    code, out = _validate(lab)

    assert code == 0 and "budget-exceeded" not in out, out


def test_an_experiments_budget_holds_only_that_experiment(tmp_path: Path) -> None:
    budgets = "\nbudgets:\n  experiments:\n    demo: 3\n"
    lab = _lab(tmp_path, budgets, [_status("demo", _id(THIS_MONTH, 1), "h200:1", 2)])
    (demo,) = _propose(lab, ("demo", "h200:1", 2 * 3600))
    code, out = _validate(lab)
    assert code == 1 and "budgets.experiments.demo 3" in out and demo in out, out
    assert "2.00 GPU-hours spent in" in out and "= 4.00" in out, out

    git(lab, "reset", "-q", "--hard", f"origin/{BRANCH}")
    _propose(lab, ("other", "h200:8", 3600))
    code, out = _validate(lab)
    assert code == 0 and "budget-" not in out, out


def test_an_unknown_estimate_is_said_and_counts_zero(tmp_path: Path) -> None:
    lab = _lab(tmp_path, MONTHLY_10, [_status("demo", _id(THIS_MONTH, 1), "h200:1", 9)])
    (rel,) = _propose(lab, ("demo", "h200:8", None))

    code, out = _validate(lab)

    assert code == 0, out
    assert "budget-unknown" in out and rel in out and "no timeout and no past runs on h200:8" in out, out


def test_the_estimate_is_the_timeout_bound_then_the_median_then_unknown(tmp_path: Path) -> None:
    lab_root = _lab(
        tmp_path,
        "",
        [
            _status("demo", _id(LAST_MONTH, 1), "h200:1", 1, 3),
            _status("demo", _id(LAST_MONTH, 2), "h200:1", 8),
            _status("demo", _id(LAST_MONTH, 3), "h200:8", 100),
        ],
    )
    lab = load_lab(lab_root)

    bound = estimate(lab, request("demo", _id(THIS_MONTH, 5), "h200:16", timeout=5400), "r.yaml")
    median = estimate(lab, request("demo", _id(THIS_MONTH, 6), "h200:1"), "r.yaml")
    unknown = estimate(lab, request("other", _id(THIS_MONTH, 7), "h200:1"), "r.yaml")

    assert (bound.hours, bound.how) == (24.0, "16 GPUs × timeout 1h30m")
    assert (median.hours, median.how) == (3.0, "median of 3 past attempts on h200:1")
    assert (unknown.hours, unknown.how) == (None, "unknown: no timeout and no past runs on h200:1")


def _plan_rows(comment: str) -> tuple[dict[str, str], str]:
    rows = dict(re.findall(r"^\| `(runs/[^`]+)` \| ([^|]+?) \|", comment, re.M))
    total = re.search(r"^\| \*\*total\*\* \| \*\*([^*]+)\*\*", comment, re.M)
    assert total, comment
    return rows, total.group(1)


def test_the_plan_shows_each_estimate_and_their_total(tmp_path: Path) -> None:
    lab = _lab(tmp_path, MONTHLY_10, [_status("demo", _id(LAST_MONTH, 1), "h200:1", 1.25)])
    rels = _propose(
        lab, ("demo", "h200:1", 2 * 3600), ("demo", "h200:8", 1800), ("demo", "h200:1", None), ("other", "h200:8", None)
    )

    code, out = tp_here(lab, "render", "--changed", "--diff", "--base", f"origin/{BRANCH}")

    assert code == 0, out
    rows, total = _plan_rows(out)
    assert rows == {rels[0]: "2.00", rels[1]: "4.00", rels[2]: "1.25", rels[3]: "unknown"}, out
    assert float(total) == pytest.approx(sum(float(v) for v in rows.values() if v != "unknown")) == 7.25
    assert "1 unknown" in out, out


def test_the_plan_shows_diffs_only_for_what_the_bot_would_submit(tmp_path: Path) -> None:
    """A request already run (edited afterwards) and a cancel are one line each: no manifests the bot
    would never send, no `new` rendering of a run that has a status."""
    done = _status("demo", _id(THIS_MONTH, 1), "h200:1", 1)
    running = _status("demo", _id(THIS_MONTH, 2), "h200:1").model_copy(update={"phase": "Running"})
    lab = _lab(tmp_path, MONTHLY_10, [done, running])
    edited, stop = (RunKey("demo", s.run_id).request_rel for s in (done, running))
    for rel in (edited, stop):
        (lab / rel).unlink()
    write_request(lab, request("demo", done.run_id, "h200:1", timeout=600))
    write_request(lab, request("demo", running.run_id, "h200:1", cancel=True))
    (new,) = _propose(lab, ("demo", "h200:1", 3600))

    code, out = tp_here(lab, "render", "--changed", "--diff", "--base", f"origin/{BRANCH}")

    assert code == 0, out
    assert out.startswith("<!-- tuneplane:plan -->\n"), out[:200]
    assert "3 changed run request(s)" in out and "1 to submit" in out, out
    assert f"- `{edited}`: already run (status: Succeeded): the bot submits nothing" in out, out
    assert f"- `{stop}`: the bot cancels this run (now Running)" in out, out
    diffs = re.findall(r"<summary><code>([^<]+)</code>: (\w+)", out)
    assert diffs == [(new, "new")], out
    rows, total = _plan_rows(out)
    assert rows == {new: "1.00"} and total == "1.00", out


def test_a_status_the_pull_request_adds_does_not_hide_its_request_from_the_plan(tmp_path: Path) -> None:
    """Only the base's statuses say a run already ran: a new request with a status written beside it in
    the same pull request is still what the bot would submit (the bot puts such a status back)."""
    lab = _lab(tmp_path, MONTHLY_10, [])
    (new,) = _propose(lab, ("demo", "h200:1", 3600))
    run_id = new.rsplit("/", 1)[1].rsplit(".", 1)[0]
    write_status(lab, _status("demo", run_id, "h200:1", 1))
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "a status of our own")

    code, out = tp_here(lab, "render", "--changed", "--diff", "--base", f"origin/{BRANCH}")

    assert code == 0, out
    assert "already run" not in out, out
    assert re.findall(r"<summary><code>([^<]+)</code>: (\w+)", out) == [(new, "new")], out


def test_budgets_are_a_closed_schema_with_located_errors(tmp_path: Path) -> None:
    lab = _lab(tmp_path, "\nbudgets:\n  monthly_gpu_hour: 10\n  experiments:\n    demo: -1\n", [])

    code, out = tp_here(lab, "validate")

    lines = (lab / "tuneplane.yaml").read_text(encoding="utf-8").splitlines()
    typo, negative = (lines.index(text) + 1 for text in ("  monthly_gpu_hour: 10", "    demo: -1"))
    assert code == 1, out
    assert f"tuneplane.yaml:{typo}:3: error [lab-schema] unknown key 'budgets.monthly_gpu_hour'" in out, out
    assert "did you mean 'monthly_gpu_hours'" in out, out
    assert f"tuneplane.yaml:{negative}:5: error [lab-schema] budgets.experiments.demo" in out, out


# ── per-person budgets: who is known only by what a pull request cannot write ───────────────────────

PEOPLE = "\nbudgets:\n  people:\n    monthly_gpu_hours: 10\n    logins:\n      Bob: 100\n"


def _for(status: RunStatus, login: str, requested_by: str = "") -> RunStatus:
    """A status as the bot writes it for a run merged by `login`'s pull request; `requested_by` is what
    the request said about itself."""
    provenance = status.provenance.model_copy(update={"requested_by": requested_by or login})
    owner = SubmittedFor(commit="a" * 40, pull_request=7, login=login)
    return status.model_copy(update={"submitted_for": owner, "provenance": provenance})


def _people_lab(tmp_path: Path) -> Path:
    """Alice's merged runs spent 9 GPU-hours this month (one of them claiming to be Bob's in its request),
    Bob's 50, and nobody's (no pull request known) 30."""
    return _lab(
        tmp_path,
        PEOPLE,
        [
            _for(_status("demo", _id(THIS_MONTH, 1), "h200:1", 4), "alice"),
            _for(_status("demo", _id(THIS_MONTH, 2), "h200:1", 5), "alice", requested_by="bob"),
            _for(_status("other", _id(THIS_MONTH, 3), "h200:1", 50), "bob"),
            _status("other", _id(THIS_MONTH, 4), "h200:1", 30),
            _for(_status("demo", _id(LAST_MONTH, 5), "h200:1", 80), "alice"),
        ],
    )


def test_a_change_over_its_authors_budget_fails_with_who_and_the_numbers(tmp_path: Path) -> None:
    lab = _people_lab(tmp_path)
    (rel,) = _propose(lab, ("demo", "h200:1", 2 * 3600))

    code, out = tp_here(lab, "validate", "--changed", "--base", f"origin/{BRANCH}", env={AUTHOR_ENV: "Alice"})

    assert code == 1 and "budget-exceeded" in out and rel in out, out
    month = NOW.strftime("%Y-%m")
    assert (
        f"budgets.people.monthly_gpu_hours 10: 9.00 GPU-hours spent by Alice, this pull request's author, "
        f"in {month} + 2.00 estimated for this change = 11.00"
    ) in out, out
    assert "budgets.people.logins.Alice" in out, out  # the fix: a budget of her own, not everyone's


@pytest.mark.parametrize("author", ["bob", "carol"])
def test_each_person_is_held_to_their_own_budget(tmp_path: Path, author: str) -> None:
    """Bob's own 100 (named in any case) holds his 50 spent; Carol spent nothing of the default 10."""
    lab = _people_lab(tmp_path)
    _propose(lab, ("demo", "h200:1", 2 * 3600))

    code, out = tp_here(lab, "validate", "--changed", "--base", f"origin/{BRANCH}", env={AUTHOR_ENV: author})

    assert code == 0 and "budget-" not in out, out


def test_a_request_cannot_say_whose_budget_pays(tmp_path: Path) -> None:
    """A request's `requested_by` is the pull request's own word: spending follows the login the bot
    recorded, so Bob's name in Alice's requests moves nothing onto Bob."""
    lab = _people_lab(tmp_path)
    path = write_request(lab, request("demo", _id(THIS_MONTH, 900), "h200:1", timeout=2 * 3600, requested_by="bob"))
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "bob's run, says the request")

    code, out = tp_here(lab, "validate", "--changed", "--base", f"origin/{BRANCH}", env={AUTHOR_ENV: "alice"})

    assert code == 1 and path.relative_to(lab).as_posix() in out and "spent by alice" in out, out
    assert spent(statuses_in(lab), NOW.strftime("%Y-%m"), by_person) == {"alice": 9.0, "bob": 50.0}


def test_a_pull_request_cannot_lower_its_authors_spending_by_removing_runs(tmp_path: Path) -> None:
    """What a person spent is read at the base, as the bot recorded it: removing one's own finished runs
    (request and status, which `status-owned` allows) in the same change moves nothing."""
    lab = _people_lab(tmp_path)
    git(lab, "rm", "-q", "-r", "--", f"runs/demo/{_id(THIS_MONTH, 2)}.yaml", f"status/demo/{_id(THIS_MONTH, 2)}.json")
    (rel,) = _propose(lab, ("demo", "h200:1", 2 * 3600))

    code, out = tp_here(lab, "validate", "--changed", "--base", f"origin/{BRANCH}", env={AUTHOR_ENV: "alice"})

    assert code == 1 and rel in out and "9.00 GPU-hours spent by alice" in out, out


def test_without_the_author_per_person_budgets_are_skipped_and_said_so(tmp_path: Path) -> None:
    lab = _people_lab(tmp_path)
    _propose(lab, ("demo", "h200:1", 2 * 3600))

    code, out = tp_here(lab, "validate", "--changed", "--base", f"origin/{BRANCH}", env={AUTHOR_ENV: ""})

    assert code == 0 and "budget-exceeded" not in out, out
    (note,) = [line for line in out.splitlines() if "budgets.people" in line]
    assert f"not checked: ${AUTHOR_ENV} is not set" in note, out


def test_a_pull_request_cannot_write_whom_a_run_was_submitted_for(tmp_path: Path) -> None:
    """`submitted_for` is the bot's: a local run's status that a pull request commits may not carry it
    (else it could move its spending onto someone else), nor may it change a bot status's."""
    lab = _people_lab(tmp_path)
    (rel,) = _propose(lab, ("demo", "local", None))
    run_id = rel.rsplit("/", 1)[1].rsplit(".", 1)[0]
    local = RunStatus(
        experiment="demo",
        run_id=run_id,
        profile="local",
        phase="Succeeded",
        backend=BackendObject(backend="local", kind="process", name=run_id),
    )
    write_status(lab, _for(local, "bob"))
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "a local run, said to be bob's")

    code, out = tp_here(lab, "validate", "--changed", "--base", f"origin/{BRANCH}", env={AUTHOR_ENV: "alice"})

    assert code == 1 and "status-owned" in out and "submitted_for" in out, out


def test_removing_finished_runs_in_the_change_lowers_no_spending(tmp_path: Path) -> None:
    """The lab's spending is the base's record too: a change that removes a finished run (its request and
    status together, which `status-owned` allows) is held to what that run spent."""
    spender = _id(THIS_MONTH, 1)
    lab = _lab(tmp_path, MONTHLY_10, [_status("demo", spender, "h200:1", 9)])
    git(lab, "rm", "-q", "--", f"runs/demo/{spender}.yaml", f"status/demo/{spender}.json")
    (rel,) = _propose(lab, ("demo", "h200:1", 2 * 3600))

    code, out = _validate(lab)

    assert code == 1 and rel in out and "9.00 GPU-hours spent in" in out, out


def test_a_status_with_forged_fields_counts_only_what_it_holds_in_the_shape_the_bot_writes(tmp_path: Path) -> None:
    """Spending and past attempts are read from statuses unchecked: a valid one counts whole; of a
    forged one only attempts holding a finite number of GPU-seconds count, a login that is no object's
    `login` counts for nobody, and a file that is no status counts nothing."""
    import json

    from tuneplane.runs.budget import by_experiment, past_attempts

    valid = _for(_status("demo", _id(THIS_MONTH, 1), "h200:1", 2.0), "Alice")
    write_status(tmp_path, valid)
    forged = {
        "profile": "h200:1",
        "submitted_for": "bob",
        "attempts": [
            {"gpu_seconds": "36000", "reason": "Completed", "started_at": _started(THIS_MONTH)},
            {"gpu_seconds": 3600, "reason": "Completed", "started_at": 7},
            "an attempt",
        ],
    }
    folder = tmp_path / "status" / "demo"
    (folder / f"{_id(THIS_MONTH, 2)}.json").write_text(json.dumps(forged), encoding="utf-8")
    (folder / f"{_id(THIS_MONTH, 3)}.json").write_text("[" * 100_000, encoding="utf-8")
    month = NOW.strftime("%Y-%m")

    assert spent(statuses_in(tmp_path), month, by_person) == {"alice": 2.0}
    assert spent(statuses_in(tmp_path), month, by_experiment) == {"demo": 3.0}  # its run's month, as pages count
    assert sorted(past_attempts(tmp_path, "demo", "h200:1")) == [3600.0, 7200.0]
