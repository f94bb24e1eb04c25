"""Sweeps: `tp sweep` writes `sweeps/<name>.yaml` and one run request per trial, in one commit.

Every change to a sweep (create, extend, cancel, rerun the failed trials) is one commit holding the
sweep file and the requests it touches, so a pull request reviews the sweep whole and `git revert`
undoes it whole. The flags every trial shares are read by `runs.requests.read_fields`, as `tp submit`
reads them; each trial's request is made by `runs.requests.new_request` (the one check every request
passes) and prepared (`runs.prepare`) before anything is written, so a sweep is refused for the same
reasons, in the same words, as each of its runs would be.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tuneplane.check.params import parse_sets
from tuneplane.check.setkeys import experiment_set_keys
from tuneplane.constants import FAILED, TERMINAL, Scalar, utc_moment, utc_now
from tuneplane.errors import UsageError
from tuneplane.lab.catalog import load_catalog
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import Lab, open_lab
from tuneplane.lab.modelparse import validate_or_raise
from tuneplane.lab.runs import RunKey, mark_cancel, read_request, read_status, write_request
from tuneplane.lab.sweeps import read_sweep, sweep_rel, write_sweep
from tuneplane.models.base import name_error
from tuneplane.models.run import RunRequest
from tuneplane.models.sweep import MAX_TRIALS, Sweep, Trial, expand, trial_count
from tuneplane.plan.resolve import prepare_experiment
from tuneplane.record.publish import publish, resolve_target
from tuneplane.runs.prepare import prepare
from tuneplane.runs.requests import TypedFlags, new_request, read_fields, requester
from tuneplane.runs.submit import lab_dirty, lab_repo
from tuneplane.runtime.records import FrozenRecord, Record, field
from tuneplane.runtime.reporter import Echo


class SweepOptions(FrozenRecord):
    """`tp sweep EXP`: the run flags every trial shares (as typed), the swept parameters, and what to do
    with the commit."""

    run: TypedFlags
    name: str = ""
    grid: tuple[str, ...] = ()  # `KEY=V1,V2,…` as typed
    sample: int | None = None
    seed: int = 0
    max_trials: int = 64
    push: bool = False
    remote: str | None = None
    branch: str | None = None


class SweepResult(Record):
    sweep: Sweep
    written: list[str] = field(default_factory=list)  # lab-relative files the commit holds
    commit: str | None = None  # None: nothing changed
    pushed: bool = False
    trials: list[Trial] = field(default_factory=list)


# ── create and extend ─────────────────────────────────────────────────────────────────────────────


def create_sweep(opts: SweepOptions, root: Path | None = None, say: Echo | None = None) -> SweepResult:
    """Write the sweep and its missing requests and commit them together; the same sweep again adds nothing."""
    lab = open_lab(root)
    repo = lab_repo(lab)
    shared = read_fields(opts.run, lab)
    grid = parse_grid(lab, opts.run.experiment, opts.grid)
    fresh = _sweep_of(opts, shared, grid, requester(repo))
    existing = _existing(lab, fresh.name)
    if existing is not None and _definition(existing) != _definition(fresh):
        raise UsageError(
            f"sweep {fresh.name!r} already exists with other settings ({sweep_rel(fresh.name)})",
            hint="`tp sweep extend NAME --grid …` adds values; or pick another --name",
        )
    sweep = existing or fresh
    return _commit(
        repo,
        lab,
        sweep,
        wrote_sweep=existing is None,
        title=f"Sweep {sweep.name} of {sweep.experiment}",
        push=opts.push,
        remote=opts.remote,
        branch=opts.branch,
        say=say,
    )


def extend_sweep(
    name: str,
    grid_flags: Sequence[str],
    root: Path | None = None,
    *,
    push: bool = False,
    remote: str | None = None,
    branch: str | None = None,
    say: Echo | None = None,
) -> SweepResult:
    """Add values to the sweep's grid (new trials get requests; the old keep their ids), in one commit.
    Without values it writes the requests the sweep lacks (a sweep written or edited by hand)."""
    lab = open_lab(root)
    repo = lab_repo(lab)
    sweep = read_sweep(lab.root, name)
    more = parse_grid(lab, sweep.experiment, grid_flags)

    def commit(target: Sweep, verb: str, wrote_sweep: bool) -> SweepResult:
        title = f"{verb} sweep {name} of {sweep.experiment}"
        return _commit(
            repo, lab, target, wrote_sweep=wrote_sweep, title=title, push=push, remote=remote, branch=branch, say=say
        )

    if not more:
        return commit(sweep, "Complete", wrote_sweep=False)
    new_keys = sorted(set(more) - set(sweep.grid))
    if new_keys:
        swept = ", ".join(sorted(sweep.grid))
        raise UsageError(
            f"{', '.join(new_keys)} is not swept by {name}: a new parameter would change every trial",
            hint=f"extend values of {swept}, or start a new sweep",
        )
    grid = {
        k: list(v) + [x for x in more.get(k, []) if _key(x) not in {_key(y) for y in v}] for k, v in sweep.grid.items()
    }
    if grid == {k: list(v) for k, v in sweep.grid.items()}:
        return SweepResult(sweep, trials=expand(sweep))
    return commit(_validated(sweep, grid=grid), "Extend", wrote_sweep=True)


def parse_grid(lab: Lab, experiment: str, items: Sequence[str]) -> dict[str, list[Scalar]]:
    """`--grid KEY=V1,V2,…` items, each value read by its parameter's type as `--set` reads it."""
    keys = experiment_set_keys(lab, load_catalog(), experiment) if items else {}
    grid: dict[str, list[Scalar]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise UsageError(f"--grid {item!r} is not KEY=V1,V2,…", hint="for example --grid learning_rate=1e-5,3e-5")
        values = [parse_sets([f"{key}={part.strip()}"], keys)[key] for part in text.split(",")]
        grid.setdefault(key, [])
        grid[key] += [v for v in values if _key(v) not in {_key(w) for w in grid[key]}]
    return grid


def _sweep_of(opts: SweepOptions, shared: dict[str, object], grid: dict[str, list[Scalar]], who: str) -> Sweep:
    """The sweep `opts` asks for: `shared` (the request fields every trial takes, read) and the grid."""
    if not grid:
        raise UsageError("a sweep needs --grid KEY=V1,V2,…", hint="for example --grid lr=1e-5,3e-5 --grid seed=0,1,2")
    sample = None if opts.sample is None else {"count": opts.sample, "seed": opts.seed}
    data: dict[str, Any] = {
        **shared,
        "name": opts.name or "pending",
        "created_at": f"{utc_moment():%Y%m%d-%H%M%S}",
        "grid": grid,
        "sample": sample,
        "max_trials": opts.max_trials,
        "requested_by": who,
    }
    if opts.name and name_error(opts.name, "sweep name"):
        raise UsageError(name_error(opts.name, "sweep name"), hint="use letters, digits, `.`, `_` and `-`")
    sweep = validate_or_raise(Sweep, data, "the command line", hint="see `tp sweep --help`")
    if not opts.name:  # named by what it runs, so the same command names the same sweep
        sweep = sweep.model_copy(update={"name": default_name(sweep)})
    return _validated(sweep)


def default_name(sweep: Sweep) -> str:
    """`<experiment>-<8 hex>` of the sweep's definition: the same `tp sweep` command names the same sweep."""
    digest = hashlib.sha256(json.dumps(_definition(sweep), sort_keys=True).encode()).hexdigest()[:8]
    return f"{sweep.experiment[:80]}-{digest}"


def _definition(sweep: Sweep) -> dict[str, Any]:
    """What makes two sweeps the same: everything but when, by whom and why it was written, and its reruns."""
    data = sweep.model_dump(mode="json", exclude={"name", "created_at", "requested_by", "message", "reruns"})
    data["grid"] = {k: sorted(map(_key, v)) for k, v in data["grid"].items()}
    return data


def _validated(sweep: Sweep, **update: Any) -> Sweep:
    """`sweep` with `update`, checked whole (the model's own rules) and against the trial cap."""
    data = sweep.model_dump(mode="json", by_alias=True) | update
    checked = validate_or_raise(Sweep, data, "the command line", hint="see `tp sweep --help`")
    count = trial_count(checked)
    if count > checked.max_trials:
        raise UsageError(
            f"sweep {checked.name} has {count} trials, over its cap of {checked.max_trials}",
            hint=f"sample fewer with --sample N, or raise --max-trials (at most {MAX_TRIALS})",
        )
    return checked


def _existing(lab: Lab, name: str) -> Sweep | None:
    return read_sweep(lab.root, name) if (lab.root / sweep_rel(name)).exists() else None


# ── cancel and rerun ──────────────────────────────────────────────────────────────────────────────


def cancel_sweep(
    name: str, root: Path | None = None, *, push: bool = False, remote: str | None = None, branch: str | None = None
) -> SweepResult:
    """`cancel: true` in every request of the sweep whose run has not ended, in one commit."""
    lab = open_lab(root)
    repo = lab_repo(lab)
    sweep = read_sweep(lab.root, name)
    changed = []
    for trial in expand(sweep):
        key = RunKey(sweep.experiment, trial.run_id)
        if not (lab.root / key.request_rel).exists():
            continue
        status = read_status(lab.root, key)
        if (status is not None and status.phase in TERMINAL) or read_request(lab.root, key).cancel:
            continue
        mark_cancel(lab.root, key)
        changed.append(key.request_rel)
    result = SweepResult(sweep, changed, trials=expand(sweep))
    if changed:
        result.commit = repo.add_and_commit(
            changed, f"Cancel sweep {name} ({len(changed)} runs)\n\nWritten by tp sweep cancel."
        )
    _push(repo, result, push, remote, branch)
    return result


def rerun_failed(
    name: str,
    root: Path | None = None,
    *,
    push: bool = False,
    remote: str | None = None,
    branch: str | None = None,
    say: Echo | None = None,
) -> SweepResult:
    """A new request for each trial whose newest run failed, pinned to that run's commit, in one commit."""
    lab = open_lab(root)
    repo = lab_repo(lab)
    sweep = read_sweep(lab.root, name)
    reruns = dict(sweep.reruns)
    pins: dict[str, str] = {}
    for trial in newest_runs(expand(sweep)):
        status = read_status(lab.root, RunKey(sweep.experiment, trial.run_id))
        if status is not None and status.phase == FAILED:
            reruns[trial.first_id] = trial.rerun + 1
            # pinned to the code the failed run ran: its recorded commit, else the commit that asked for it
            key = RunKey(sweep.experiment, trial.run_id)
            pins[trial.first_id] = status.provenance.commit or repo.added_in(key.request_rel) or repo.head()
    if not pins:
        return SweepResult(sweep, trials=expand(sweep))
    rerun = _validated(sweep, reruns=reruns)
    return _commit(
        repo,
        lab,
        rerun,
        wrote_sweep=True,
        title=f"Rerun the failed trials of sweep {name}",
        push=push,
        remote=remote,
        branch=branch,
        say=say,
        pins=pins,
    )


def newest_runs(trials: list[Trial]) -> list[Trial]:
    """The newest run of each trial (its last rerun, else the trial itself), in trial order."""
    newest: dict[int, Trial] = {}
    for trial in trials:
        newest[trial.index] = trial
    return [newest[i] for i in sorted(newest)]


# ── writing ───────────────────────────────────────────────────────────────────────────────────────


def trial_request(sweep: Sweep, trial: Trial, who: str, commit: str = "") -> RunRequest:
    """The run request of one trial, checked as every request tp makes is."""
    return new_request(
        command="sweep",
        experiment=sweep.experiment,
        run_id=trial.run_id,
        profile=sweep.profile,
        image=sweep.image,
        observability_url=sweep.observability_url,
        set={**sweep.set, **trial.params},
        inputs=sweep.inputs,
        timeout=sweep.timeout,
        message=sweep.message or f"trial {trial.index + 1} of sweep {sweep.name}",
        commit=commit if trial.rerun else "",
        rerun_of=trial.rerun_of,
        requested_by=who,
        created_at=utc_now(),
        sweep=sweep.name,
    )


def _commit(
    repo: GitRepo,
    lab: Lab,
    sweep: Sweep,
    *,
    wrote_sweep: bool,
    title: str,
    push: bool,
    remote: str | None,
    branch: str | None,
    say: Echo | None,
    pins: dict[str, str] | None = None,
) -> SweepResult:
    """Prepare every missing request (refusing before anything is written), write them and the sweep, commit
    (and push it to `remote`/`branch` when asked)."""
    who = requester(repo)
    trials = expand(sweep)
    missing = [t for t in trials if not (lab.root / RunKey(sweep.experiment, t.run_id).request_rel).exists()]
    requests = [trial_request(sweep, t, who, (pins or {}).get(t.first_id, "")) for t in missing]
    _prepare_all(repo, lab, requests)
    result = SweepResult(sweep, trials=trials)
    if not missing and not wrote_sweep:
        _push(repo, result, push, remote, branch)
        return result  # the same sweep again: nothing to add
    if wrote_sweep:
        write_sweep(lab.root, sweep)
    result.written.append(sweep_rel(sweep.name))  # also a sweep file written by hand and not yet committed
    for request in requests:
        write_request(lab.root, request)
        result.written.append(RunKey(request.experiment, request.run_id).request_rel)
    body = f"{len(requests)} new run request{'s' if len(requests) != 1 else ''}."
    if not repo.is_dirty(result.written):  # a deleted request written again as committed: nothing to commit
        result.commit = repo.head()
    else:
        result.commit = repo.add_and_commit(result.written, f"{title}\n\n{body}\nWritten by tp sweep.")
    if say is not None:
        say(f"wrote {sweep_rel(sweep.name)} and {len(requests)} run requests (committed {result.commit[:12]})")
    _push(repo, result, push, remote, branch)
    return result


def _prepare_all(repo: GitRepo, lab: Lab, requests: list[RunRequest]) -> None:
    """Resolve → compile → render each request in memory: any refusal comes before a file is written."""
    if not requests:
        return
    experiment = prepare_experiment(lab, requests[0].experiment, load_catalog())
    commit, dirty = repo.head(), lab_dirty(repo, lab)
    for request in requests:
        try:
            prepare(
                lab,
                request,
                commit=request.commit or commit,
                dirty=dirty and not request.commit,
                allow_dirty=True,
                prepared_experiment=experiment,
            )
        except UsageError as exc:
            trial = f"trial {request.run_id} ({_params_text(request)})"
            raise UsageError(f"{trial}: {exc.message}", hint=exc.hint) from None


def _params_text(request: RunRequest) -> str:
    return ", ".join(f"{k}={v}" for k, v in request.set.items())


def _push(repo: GitRepo, result: SweepResult, push: bool, remote: str | None, branch: str | None) -> None:
    if push:
        publish(repo, resolve_target(repo, remote, branch))
        result.pushed = True


def _key(value: object) -> str:
    return json.dumps(value) + type(value).__name__
