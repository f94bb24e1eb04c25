"""Rendering run requests for review: one request, many, or the Markdown diff of a pull request.

`tp render`, `tp export` and `tp eval` drive a `RenderContext`: one lab, one catalog, one commit, each
experiment prepared once for every request that names it, each request made by `runs.prepare` as
`tp submit` and the bot make it, then shown (`shown`). Text goes to the `out` callable and notes to
`note`, so the CLI decides where they are printed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneplane.backends.factory import cluster_kind
from tuneplane.check.validate import run_files
from tuneplane.constants import PREVIEW_RUN_ID, TERMINAL, RenderFormat
from tuneplane.errors import UsageError
from tuneplane.lab.catalog import load_catalog
from tuneplane.lab.fs import atomic_write, present
from tuneplane.lab.gitrepo import GitRepo
from tuneplane.lab.load import open_lab
from tuneplane.lab.modelparse import first_problem_error, parse_model
from tuneplane.lab.runs import RunKey, parse_request, parse_status
from tuneplane.lab.yamlio import LoadFailed, load_yaml, parse_yaml, read_text
from tuneplane.models.run import RunRequest
from tuneplane.plan.environment import job_env
from tuneplane.plan.resolve import PreparedExperiment, prepare_experiment
from tuneplane.render.diff import RenderedChange, diff_comment
from tuneplane.render.manifests import to_yaml
from tuneplane.runs import budget
from tuneplane.runs.prepare import PreparedRun, prepare
from tuneplane.runs.requests import TypedFlags, read_request, requester
from tuneplane.runtime.records import FrozenRecord, Record, field
from tuneplane.runtime.reporter import Echo, plain

if TYPE_CHECKING:
    from tuneplane.lab.catalog import Catalog
    from tuneplane.lab.load import Lab
    from tuneplane.models.jobspec import JobSpec
    from tuneplane.models.run import RunRequest
    from tuneplane.plan.launchplan import LaunchPlan


class RenderOptions(Record):
    """What `tp render` was asked, as one typed request."""

    targets: list[str]
    run: TypedFlags = field(default_factory=TypedFlags)  # with one EXP target: the run to render
    run_id: str = PREVIEW_RUN_ID
    output: Path | None = None
    fmt: RenderFormat = RenderFormat.yaml
    allow_dirty: bool = False
    all: bool = False
    changed: bool = False
    diff: bool = False
    base: str | None = None

    def has_run_flags(self) -> bool:
        return self.run.replace(sets=tuple(self.run.sets)) != TypedFlags() or self.run_id != PREVIEW_RUN_ID


def run_render(opts: RenderOptions, out: Echo = plain.text, note: Echo = plain.note) -> int:
    """Render what `opts` names; give it to `out` or write it. Returns how many run requests were refused."""
    if opts.diff and not opts.changed:
        raise UsageError("--diff compares changed run requests", hint="use tp render --changed --diff")
    context = RenderContext.open(opts, out, note)
    if opts.changed:
        return context.changed()
    if opts.all:
        return context.many([str(p) for p in context.all_requests()])
    if not opts.targets:
        raise UsageError(
            "name what to render: EXP, a run request file, --all or --changed",
            hint="tp render EXP --profile NAME[:GPUS], tp render runs/EXP/RUN.yaml",
        )
    if len(opts.targets) == 1 and not _is_request_file(opts.targets[0]):
        return context.one(context.typed_request(opts.targets[0]), opts.targets[0])
    if opts.has_run_flags():
        raise UsageError(
            "run flags (--profile, --set, --image, …) go with EXP, not with a run request file",
            hint="edit the run request, or render the experiment with the flags",
        )
    missing = [context.rel(Path(t)) for t in opts.targets if not os.path.lexists(t)]
    if missing:  # a path that names nothing is a usage error, as for tp validate and tp rerun (exit 2)
        raise UsageError(
            f"{', '.join(missing)}: no such file",
            hint="check the path: is it spelled as the lab has it? (`tp job ls --all` lists the runs)",
        )
    return context.many(opts.targets)


def _is_request_file(target: str) -> bool:
    return target.endswith((".yaml", ".yml")) or "/" in target


class Rendered(FrozenRecord):
    spec: JobSpec
    plan: LaunchPlan
    docs: list[dict[str, Any]]
    text: str | None  # the validated YAML text (None for a local run: its JobSpec document is shown)


# ── the rendering session ───────────────────────────────────────────────────────────────────────────


class RenderContext(Record):
    """One lab, one catalog, one commit; experiments prepared once for every request that names them."""

    opts: RenderOptions
    lab: Lab
    catalog: Catalog
    repo: GitRepo
    commit: str
    dirty: bool
    prepared: dict[str, PreparedExperiment] = field(default_factory=dict)
    out: Echo = plain.text  # rendered text, exactly as given
    note: Echo = plain.note  # one line for the person (refusals, where files went)

    @classmethod
    def open(cls, opts: RenderOptions, out: Echo = plain.text, note: Echo = plain.note) -> RenderContext:
        lab = open_lab()
        repo = GitRepo(lab.root)
        try:
            commit = repo.head()
        except UsageError:
            commit = "0" * 40  # a lab without commits yet still renders, marked dirty below
        dirty = repo.is_dirty()
        if dirty and not opts.allow_dirty and not opts.diff:
            note(
                f"note: the lab has uncommitted changes; rendering them against HEAD {commit[:12]} "
                "(a job would clone the commit, not your working tree)"
            )
        return cls(opts, lab, load_catalog(), repo, commit, dirty, out=out, note=note)

    # requests

    def typed_request(self, experiment: str) -> RunRequest:
        o = self.opts
        if not o.run.profile:
            raise UsageError(
                f"--profile is required to render experiment {experiment!r}",
                hint=f"profiles: {', '.join(self.lab.config.profiles)}",
            )
        # who asks, as `tp submit` records it: the preview's annotations and digest are the submitted ones
        return read_request(
            o.run.replace(experiment=experiment),
            run_id=o.run_id,
            command="render",
            lab=self.lab,
            catalog=self.catalog,
            requested_by=requester(self.repo),
        )

    def all_requests(self) -> list[Path]:
        return run_files(self.lab)

    # rendering

    def render_request(self, request: RunRequest, *, warn: bool = True) -> Rendered:
        """The run as `prepare` makes it for the backend, shown. `warn`: say what `tp submit` would warn
        of (not for a pull request's base version, which no longer runs)."""
        if request.experiment not in self.prepared:
            self.prepared[request.experiment] = prepare_experiment(self.lab, request.experiment, self.catalog)
        run = prepare(
            self.lab,
            request,
            commit=self.commit,
            dirty=self.dirty,
            allow_dirty=True,
            prepared_experiment=self.prepared[request.experiment],
            warn=self._warning if warn else None,
        )  # what `tp submit` warns of, said here too
        return shown(run)

    def _warning(self, text: str) -> None:
        self.note(f"warning: {text}")

    def text(self, rendered: Rendered) -> str:
        """YAML: the rendered text itself (it is what was parsed back and validated); JSON: the documents."""

        if self.opts.fmt is RenderFormat.json:
            return json.dumps(rendered.docs, indent=2, ensure_ascii=False) + "\n"
        return rendered.text if rendered.text is not None else to_yaml(rendered.docs)

    def one(self, request: RunRequest, label: str) -> int:
        self.emit(request, self.render_request(request), label, single=True)
        return 0

    def many(self, targets: list[str]) -> int:
        """Render each target; a refusal is reported and counted, the others still render."""
        refusals = self.render_files(targets) if self.parallel(targets) else self.render_each(targets)
        for target, message in refusals:
            where = self.rel(Path(target))
            if message.startswith(f"{where}:"):  # about the file itself: named once, at its place
                where, _, message = message.partition(": ")
            self.note(f"{where}: refused: {message}")
        if self.opts.output is not None:
            self.note(
                f"rendered {len(targets) - len(refusals)} run request(s) into {self.opts.output}"
                + (f"; {len(refusals)} refused" if refusals else "")
            )
        return len(refusals)

    def render_each(self, targets: list[str]) -> list[tuple[str, str]]:
        refusals = []
        for target in targets:
            try:
                request = self.request_from_file(Path(target))
                rendered = self.render_request(request)
            except UsageError as exc:
                refusals.append((target, str(exc)))
                continue
            self.emit(request, rendered, self.rel(Path(target)), single=len(targets) == 1)
        return refusals

    def parallel(self, targets: list[str]) -> bool:
        """Many requests into files, several CPUs and fork: split the work over worker processes. Never
        while another thread runs (a host that calls us in-process): its locks would stay held in the
        children (Python 3.12 and later warn of it)."""

        return (
            self.opts.output is not None
            and len(targets) >= PARALLEL_MIN
            and (os.cpu_count() or 1) > 1
            and "fork" in multiprocessing.get_all_start_methods()
            and _one_thread()
        )

    def render_files(self, targets: list[str]) -> list[tuple[str, str]]:
        """The first request renders here (templates, schemas and experiments warm up once), then
        forked workers render the rest, each writing its own files; refusals come back in order."""

        global _WORKER
        first = self.render_each(targets[:1])
        rest = targets[1:]
        workers = min(os.cpu_count() or 1, MAX_WORKERS)
        chunks = [rest[i::workers] for i in range(workers)]
        _WORKER = self
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                results = pool.map(_render_chunk, chunks)
        finally:
            _WORKER = None
        order = {t: i for i, t in enumerate(targets)}
        return first + sorted((r for chunk in results for r in chunk), key=lambda r: order[r[0]])

    def emit(self, request: RunRequest, rendered: Rendered, label: str, single: bool) -> None:
        text = self.text(rendered)
        if self.opts.output is None:
            self.out(text if single or self.opts.fmt is RenderFormat.json else f"# {label}\n{text}")
            return
        suffix = (
            ".json"
            if self.opts.fmt is RenderFormat.json
            else (cluster_kind(self.lab).rendered_suffix if rendered.text is not None else ".yaml")
        )
        atomic_write(self.opts.output / request.experiment / f"{request.run_id}{suffix}", text)

    def request_from_file(self, path: Path, text: str | None = None) -> RunRequest:
        rel = self.rel(path)
        try:
            doc = parse_yaml(text, rel) if text is not None else load_yaml(path, rel, root=self.lab.root)
        except LoadFailed as exc:
            raise first_problem_error([exc.problem]) from None
        request, problems = parse_model(RunRequest, doc, "run-schema")
        if request is None:
            raise first_problem_error(problems[:1])
        return request

    def rel(self, path: Path) -> str:
        # abspath, not resolve: a symlinked request is named where it sits (and refused there)
        return self.lab.rel(Path(os.path.abspath(path))) if path.is_absolute() or present(path) else path.as_posix()

    # --changed [--diff]

    def changed(self) -> int:
        # a user's --base reaches git only as a verified commit id (see GitRepo.verify_commit)
        base = self.repo.verify_commit(self.opts.base) if self.opts.base is not None else ""
        paths = [p for p in self.repo.changed_files(base or None) if _is_run_request(p)]
        ran = budget.ran_at_base(self.repo, base or None)
        cost = budget.estimates(self.lab, paths, ran)  # the GPU-hours of what the bot would submit
        if not self.opts.diff:
            existing = [str(self.lab.root / p) for p in paths if present(self.lab.root / p)]
            refused = self.many(existing) if existing else 0
            for line in budget.plan_lines(cost):
                self.note(line)
            return refused

        base = base or self.repo.default_merge_base() or ""
        changes = [self.change(p, base) for p in paths]
        self.out(diff_comment(changes, self.opts.base or base[:12] or "(no base)", plan=budget.plan_table(cost)))
        return sum(1 for c in changes if c.error)

    def change(self, rel: str, base: str) -> RenderedChange:
        """Both renderings of one changed request; a base that no longer renders counts as absent. A
        request the bot submits nothing for is one line saying what the bot does instead."""
        path = self.lab.root / rel
        outcome = bot_outcome(self.lab.root, rel, lambda status_rel: self.repo.show(base, status_rel) if base else None)
        if outcome:
            return RenderedChange(rel, None, None, outcome=outcome)
        before_text = self.repo.show(base, rel) if base else None
        try:
            before = self.render_text(path, before_text, warn=False) if before_text is not None else None
        except UsageError:
            before = None
        try:
            after = self.render_text(path, None) if present(path) else None
        except UsageError as exc:
            return RenderedChange(rel, before, None, error=str(exc))
        return RenderedChange(rel, before, after)

    def render_text(self, path: Path, text: str | None, *, warn: bool = True) -> str:
        return self.text(self.render_request(self.request_from_file(path, text), warn=warn))


PARALLEL_MIN = 64  # below this, starting workers costs more than it saves
MAX_WORKERS = 8
_WORKER: RenderContext | None = None  # the warmed-up context forked workers inherit


def _one_thread() -> bool:
    """No other thread runs, those started below `threading` (native ones) too: Linux lists them all."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


def _render_chunk(targets: list[str]) -> list[tuple[str, str]]:
    assert _WORKER is not None
    return _WORKER.render_each(targets)


def shown(run: PreparedRun) -> Rendered:
    """What `tp render` shows of a prepared run: what its backend shows of its payload (the manifests'
    YAML; the batch script, or as JSON the script and the launch document it fills in); for a local run,
    which has none, the JobSpec and the process the local backend starts."""
    spec, plan = run.spec, run.plan
    if run.payload is None:
        return Rendered(spec, plan, local_documents(spec, plan), None)
    text, docs = run.payload.shown()
    return Rendered(spec, plan, docs, text)


def local_documents(spec: JobSpec, plan: LaunchPlan) -> list[dict[str, Any]]:
    """A local run has no manifests: show its JobSpec and the process the local backend starts."""

    launch = {
        "apiVersion": "tuneplane/v1",
        "kind": "LaunchPlan",
        "argv": list(plan.argv),
        "cwd": plan.cwd,
        "mode": plan.mode,
        "env": job_env(spec, plan.env),
        "secret_env": dict(plan.secret_env),
    }
    return [spec.to_json_dict(), launch]


def bot_outcome(root: Path, rel: str, status_at_base: Callable[[str], str | None]) -> str:
    """What the bot does with a changed run request file instead of submitting it ("": it submits it).

    The bot submits a request that has no status yet and does not say `cancel: true`; it cancels the
    job of a run that has a status and says it; every other change to a request is for people only.
    The status is read at the base (`status_at_base`): a status the pull request itself adds would
    otherwise hide a new request's manifests from its own plan."""
    parts = rel.split("/")
    if len(parts) != 3:
        return ""
    key = RunKey(parts[1], parts[2].rsplit(".", 1)[0])
    if not present(root / rel):
        return "removed: the bot does nothing (a run it started goes on; cancel it with `cancel: true`)"
    try:
        text = status_at_base(key.status_rel)
        if text is None:
            return ""
        status = parse_status(text, key.status_rel)
        request = parse_request(read_text(root / rel, rel, root=root), rel)
    except (UsageError, LoadFailed):
        return ""  # `tp validate` reports it; the rendering below says it is refused
    if request.cancel:
        if status.phase in TERMINAL:
            return f"cancel: true, but the run already ended ({status.phase}): the bot does nothing"
        return f"the bot cancels this run (now {status.phase})"
    return f"already run (status: {status.phase}): the bot submits nothing for this change"


def _is_run_request(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 3 and parts[0] == "runs" and rel.endswith((".yaml", ".yml"))
