"""`tuneplane-launch`: verify and install the job's algorithm plugins, then start the training entrypoint.

It runs first in every job (standard library only: training images may lack our dependencies):

1. read `.tuneplane/jobspec.json` from the work dir (`TUNEPLANE_WORK_DIR`, default the current dir);
2. for each `capability: algorithm` plugin under `tuneplane_plugins/<name>/`: recompute the directory
   digest and compare it to the JobSpec, check `requires_core` against the running tuneplane; only when
   every plugin passes, put each root on `sys.path`, import it, and call `install(params)` (eager) or
   register it for `tuneplane.plugins.install_deferred` (deferred);
3. run `launch.argv`: a Python entry (`python -m mod …`, `python file.py …`) runs in this interpreter
   so the patches are in effect; anything else is exec'd, or run as a child where this launcher
   collects the job's metrics (node rank zero with reporting on, `tuneplane.collector`).

Ranks started by torchrun or accelerate re-enter the bridge as `python -m tuneplane.launcher ENTRY…`
(ENTRY is `-m mod …` or `file.py …`): the plugins are verified and installed in each rank, then ENTRY
runs in that rank's interpreter. Any refusal exits with CONFIG_ERROR_EXIT before training starts.

The job's log names each plugin once (`plugin  : … applied`, `… registered`, `… skipped`): only the
job's first process says it, the process that installs the plugins on node 0 (global rank 0 where
ranks re-enter), never the launcher above ranks that will say it themselves.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

import tuneplane.runtime.attempts as attempts
import tuneplane.runtime.launchline as launchline
from tuneplane import __version__, plugins
from tuneplane.constants import (
    AFTER_JOB_UPLOAD_SECONDS,
    ATTEMPT_ENV,
    CONFIG_ERROR_EXIT,
    NAME_PATTERN,
    NODE_RANK_ENV,
    OUT_DIR_ENV,
    RESUME_FROM_ENV,
    WORK_DIR_ENV,
)
from tuneplane.report.checkpoints import newest_complete
from tuneplane.runtime.digest import DigestError, pinned_copy, unpinned_folders
from tuneplane.runtime.entry import (
    PythonEntry,
    entry_after_interpreter,
    python_entry,
    reentry_argv,
    run_python_entry,
)
from tuneplane.runtime.pinned import bytecode_files, drop_caches, guard_imports, report_failure, run_ranks
from tuneplane.runtime.records import FrozenRecord
from tuneplane.runtime.streams import print_or_quit
from tuneplane.runtime.supervise import JobAttempt, Outcome, supervise
from tuneplane.runtime.versions import parse_version, version_admits  # noqa: F401 - re-exported

JOBSPEC_PATH = ".tuneplane/jobspec.json"
LAUNCH_ERROR_FILE = ".tuneplane/launch-error"  # a rank's one-line refusal, for the launcher that started it
PLUGINS_DIR = "tuneplane_plugins"
LOADED_CAPABILITY = "algorithm"
PYCACHE_PREFIX_ENV = "PYTHONPYCACHEPREFIX"
REENTRY_MARKERS = ("tuneplane.launcher", "tuneplane-launch")
BEFORE_JOB_UPLOAD_SECONDS = 30.0  # at most this long, before the trainer, for an earlier attempt's leftovers

Emit = Callable[[str], None]


class LaunchError(Exception):
    """The job must stop before training: the message says what and how to fix it."""


# ── JobSpec (the subset the launcher needs; unknown keys are ignored) ──────────────────────────────


class PluginRef(FrozenRecord):
    """One `spec.plugins` entry, as the launcher reads it from the JobSpec (`models.jobspec.LockedPluginRef`)."""

    id: str
    name: str
    version: str
    digest: str
    capability: str
    entrypoint: str
    load: str
    requires_core: str

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"


class Launch(FrozenRecord):
    argv: list[str]
    mode: str
    cwd: str
    in_process: bool


class JobSpecView(FrozenRecord):
    framework: str
    hyperparams: Mapping[str, Any]
    plugins: list[PluginRef]
    launch: Launch


def work_dir() -> Path:
    """The job package root: `TUNEPLANE_WORK_DIR`, else the current directory."""
    return Path(os.environ.get(WORK_DIR_ENV) or os.getcwd()).resolve()


def read_jobspec(work: Path) -> JobSpecView:
    """Parse the JobSpec the platform wrote into the work dir."""
    path = work / JOBSPEC_PATH
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LaunchError(
            f"no JobSpec at {path}; tuneplane-launch runs inside a job package (set TUNEPLANE_WORK_DIR to its root)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LaunchError(f"cannot read the JobSpec {path}: {exc}") from None
    except (RecursionError, ValueError) as exc:  # nesting past the parser's depth, an integer past its digits
        raise LaunchError(f"cannot read the JobSpec {path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    return _jobspec_from(raw, path)


def _jobspec_from(raw: Any, path: Path) -> JobSpecView:
    spec = _mapping(raw, "the JobSpec", path)
    if spec.get("apiVersion") != "tuneplane/v1" or spec.get("kind") != "TrainingJob":
        raise LaunchError(
            f"{path} is not a tuneplane/v1 TrainingJob (apiVersion={spec.get('apiVersion')!r}, "
            f"kind={spec.get('kind')!r})"
        )
    body = _mapping(spec.get("spec"), "spec", path)
    framework = _mapping(body.get("framework", {}), "spec.framework", path).get("kind", "")
    hyperparams = _mapping(body.get("hyperparams", {}), "spec.hyperparams", path)
    raw_plugins = body.get("plugins")
    raw_plugins = [] if raw_plugins is None else raw_plugins
    if not isinstance(raw_plugins, list):
        raise LaunchError(f"{path}: spec.plugins must be a list")
    refs = [_plugin_from(item, i, path) for i, item in enumerate(raw_plugins)]
    return JobSpecView(
        str(framework), MappingProxyType(dict(hyperparams)), refs, _launch_from(spec.get("launch"), path)
    )


def _mapping(value: Any, what: str, path: Path) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise LaunchError(f"{path}: {what} must be an object, got {type(value).__name__}")
    return value


def _plugin_from(item: Any, index: int, path: Path) -> PluginRef:
    where = f"spec.plugins[{index}]"
    entry = _mapping(item, where, path)
    fields = {}
    for key in ("id", "name", "version", "digest", "capability"):
        value = entry.get(key)
        if not isinstance(value, str) or not value:
            raise LaunchError(f"{path}: {where}.{key} must be a non-empty string")
        fields[key] = value
    if not re.fullmatch(NAME_PATTERN, fields["name"]):
        raise LaunchError(f"{path}: {where}.name {fields['name']!r} is not a plugin name")
    load = entry.get("load") or "eager"
    if load not in ("eager", "deferred"):
        raise LaunchError(f"{path}: {where}.load must be eager or deferred, got {load!r}")
    return PluginRef(
        entrypoint=str(entry.get("entrypoint") or ""),
        load=str(load),
        requires_core=str(entry.get("requires_core") or ""),
        **fields,
    )


def _launch_from(value: Any, path: Path) -> Launch:
    launch = _mapping(value, "launch", path)
    argv = launch.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise LaunchError(f"{path}: launch.argv must be a non-empty list of strings")
    return Launch(
        argv=list(argv),
        mode=str(launch.get("mode") or "direct"),
        cwd=str(launch.get("cwd") or ""),
        in_process=bool(launch.get("in_process", False)),
    )


# ── plugins ────────────────────────────────────────────────────────────────────────────────────────


def verify_plugin(work: Path, plugin: PluginRef, core_version: str = __version__) -> Path:
    """Check one plugin's package against the JobSpec; return the private copy to import from.

    The files the digest covers are copied, each read once, into a folder only this process knows,
    and the digest is taken of the bytes written there: what is imported is what was verified, and
    nothing else of the job package (bytecode, a `.venv/`) is reachable from the copy.
    LaunchError on any mismatch.
    """
    shown = f"{PLUGINS_DIR}/{plugin.name}/"
    root = work / PLUGINS_DIR / plugin.name
    if not root.is_dir():
        raise LaunchError(
            f"plugin {plugin.ref}: its package {shown} is missing from "
            f"the job package at {work}; resubmit so the platform injects it"
        )
    if os.path.realpath(root) != os.path.join(os.path.realpath(work), PLUGINS_DIR, plugin.name):
        raise LaunchError(
            f"plugin {plugin.ref}: {shown} is a symlink (to {os.path.realpath(root)}); a plugin "
            "ships as its own files inside the job package. Replace the link with the plugin's "
            "folder in the lab and submit again"
        )
    unpinned = unpinned_folders(root)
    if unpinned:
        raise LaunchError(
            f"plugin {plugin.ref}: {shown}{unpinned[0]}/ is a folder the digest skips, so its files "
            "would ship unpinned; remove it from the plugin, re-lock and submit again"
        )
    sourceless = bytecode_files(root)
    if sourceless:
        raise LaunchError(
            f"plugin {plugin.ref}: {shown}{sourceless[0]} is compiled bytecode, "
            "which the digest does not pin; remove it from the plugin and commit only source"
        )
    copy = Path(tempfile.mkdtemp(prefix=f"{plugin.name}-", dir=_private_dir())) / plugin.name
    try:
        actual = pinned_copy(root, copy)
    except (DigestError, OSError) as exc:
        raise LaunchError(f"plugin {plugin.ref}: cannot digest {shown}: {exc}") from None
    if actual != plugin.digest:
        raise LaunchError(
            f"plugin {plugin.ref}: {shown} has digest {actual} but the JobSpec locked "
            f"{plugin.digest}; the package changed after it was locked. Restore it, or re-lock it with "
            f"`tp plugin lock <experiment> {plugin.ref}` and submit again"
        )
    _check_core(plugin, core_version)
    return copy


_PRIVATE: list[str] = []  # this process's folder of verified plugin copies, made on first use


def _private_dir() -> str:
    """A folder only this user can read, removed when the process that made it exits."""
    if not _PRIVATE:
        path = tempfile.mkdtemp(prefix="tuneplane-plugins-")
        _PRIVATE.append(path)
        owner = os.getpid()

        def remove() -> None:
            if os.getpid() == owner:  # a forked child must not remove what its parent still imports from
                shutil.rmtree(path, ignore_errors=True)

        atexit.register(remove)
    return _PRIVATE[0]


def trusted_bytecode(work: Path) -> None:
    """No bytecode cache in the job package is read by the trainer, its ranks or the workers it spawns.

    A `.pyc` compiled with `UNCHECKED_HASH` and committed in a `__pycache__/` beside a source would run
    in place of that source. Every `__pycache__/` of the job package is removed before anything of it
    is imported, so the caches read afterwards are the ones Python writes from the sources. Where one
    cannot be removed (a read-only package), bytecode goes to a private cache prefix for this process
    and every child instead. The prefix is the fallback, not the rule: under it Python reads none of
    the image's own caches and compiles torch, transformers and the rest again in every job (about
    8 CPU-seconds for a TRL trainer, 4 for `accelerate launch`). A prefix already set (by the
    launcher that started this rank, or the user) is kept: it is not beside the source either.
    """
    if sys.pycache_prefix is not None or drop_caches(work):
        return
    prefix = os.path.join(_private_dir(), "bytecode")
    sys.pycache_prefix = prefix
    os.environ[PYCACHE_PREFIX_ENV] = prefix


def _verify_only(work: Path, plugin: PluginRef) -> None:
    """Verify without importing (each rank verifies again and imports its own copy)."""
    shutil.rmtree(verify_plugin(work, plugin).parent, ignore_errors=True)


def _check_core(plugin: PluginRef, core_version: str) -> None:
    try:
        admitted = version_admits(plugin.requires_core, core_version)
    except ValueError as exc:
        raise LaunchError(f"plugin {plugin.ref}: requires.core {plugin.requires_core!r} is invalid: {exc}") from None
    if not admitted:
        raise LaunchError(
            f"plugin {plugin.ref} requires tuneplane {plugin.requires_core} but this job runs tuneplane "
            f"{core_version}; use an image with a matching tuneplane, or lock a plugin version whose "
            "requires.core admits it"
        )


def _load_install(root: Path, plugin: PluginRef) -> Callable[..., Any]:
    """Put the plugin root first on sys.path and import its entrypoint function."""
    module_name, sep, attr = plugin.entrypoint.partition(":")
    if not sep or not module_name or not attr:
        raise LaunchError(f"plugin {plugin.ref}: entrypoint {plugin.entrypoint!r} is not module:function")
    _refuse_foreign_module(root, plugin, module_name.split(".")[0])
    guard_imports(root)  # the pinned .py only: bytecode beside it is outside the digest
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # any import failure, SystemExit included, stops the job with the plugin named
        traceback.print_exc()
        raise LaunchError(f"plugin {plugin.ref}: importing {module_name} failed: {type(exc).__name__}: {exc}") from None
    install = getattr(module, attr, None)
    if not callable(install):
        raise LaunchError(f"plugin {plugin.ref}: {module_name} has no callable {attr!r}")
    return install  # type: ignore[no-any-return]


def _refuse_foreign_module(root: Path, plugin: PluginRef, top: str) -> None:
    """Refuse when `top` is already imported from elsewhere: the import would silently reuse it."""
    existing = sys.modules.get(top)
    if existing is None:
        return
    paths = [str(p) for p in getattr(existing, "__path__", [])]
    module_file = getattr(existing, "__file__", None)
    paths += [str(module_file)] if module_file else []
    if any(Path(p).resolve().is_relative_to(root.resolve()) for p in paths):
        return
    origin = paths[0] if paths else "a built-in module"
    raise LaunchError(
        f"plugin {plugin.ref}: its module {top!r} is already imported from {origin} "
        "(another plugin or the framework uses the same name); rename the plugin's module "
        "and re-lock it"
    )


def _apply(plugin: PluginRef, root: Path, params: Mapping[str, Any], emit: Emit) -> None:
    install = _load_install(root, plugin)
    if plugin.load == "deferred":
        plugins.register_deferred(plugin.name, plugin.ref, install, params)
        plugins.mark_installed(plugin.id, plugin.digest)
        emit(f"plugin  : {plugin.ref} registered in entrypoint process (deferred)")
        return
    try:
        install(params)
    except BaseException as exc:  # a patch that did not apply (or exited, even with 0) must stop the job
        traceback.print_exc()
        raise LaunchError(
            f"plugin {plugin.ref}: install(params) raised {type(exc).__name__}: {exc}; "
            "the job stops because training without the patch would not be the "
            "experiment that was declared"
        ) from None
    plugins.mark_installed(plugin.id, plugin.digest)
    emit(f"plugin  : {plugin.ref} applied in entrypoint process")


def loaded_plugins(spec: JobSpecView, emit: Emit) -> list[PluginRef]:
    """The plugins this process loads; the others are named in a log line and left alone. A data-prep
    plugin never runs in a job, whatever its manifest's `execution` says: it runs on your machine."""
    chosen = []
    for plugin in spec.plugins:
        if plugin.capability == LOADED_CAPABILITY:
            chosen.append(plugin)
        elif plugin.capability == "data-prep":
            emit(f"plugin  : {plugin.ref} skipped (a data-prep plugin runs on your machine, never in a job)")
        else:
            emit(
                f"plugin  : {plugin.ref} skipped (capability {plugin.capability} is not loaded in the "
                "entrypoint process)"
            )
    return chosen


def speaks_for_job(env: Mapping[str, str]) -> bool:
    """Whether this process writes the job's plugin lines: node 0, and global rank 0 among ranks."""
    return all(env.get(name, "").strip() in ("", "0") for name in (NODE_RANK_ENV, "RANK"))


def _quiet(line: str) -> None:
    """An Emit for the processes that install plugins without naming them (the job names each once)."""


def install_plugins(spec: JobSpecView, work: Path, emit: Emit = print) -> list[PluginRef]:
    """Verify every algorithm plugin, then install them in order; return what this call installed.

    Verification of all comes first, so a tampered plugin stops the job before any patch runs.
    A plugin already installed in this process (same id and digest) is left as it is.
    """
    chosen = loaded_plugins(spec, emit)
    roots = [verify_plugin(work, p) for p in chosen]
    done = []
    for plugin, root in zip(chosen, roots, strict=True):
        if plugins.already_installed(plugin.id, plugin.digest):
            continue
        _apply(plugin, root, spec.hyperparams, emit)
        done.append(plugin)
    return done


# ── the entrypoint ─────────────────────────────────────────────────────────────────────────────────


def exec_argv(argv: list[str]) -> NoReturn:
    """Replace this process with `argv`, as a shell would; 127/126 when it cannot start."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        _fail(f"cannot start {argv[0]!r}: command not found", 127)
    except OSError as exc:
        _fail(f"cannot start {argv[0]!r}: {exc}", 126)


def _fail(message: str, code: int) -> NoReturn:
    print(f"tuneplane-launch: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def _enter_cwd(work: Path, launch: Launch) -> None:
    target = (work / launch.cwd) if launch.cwd else work
    try:
        os.chdir(target)
    except OSError as exc:
        raise LaunchError(f"cannot enter the launch directory {target}: {exc}") from None


def _plan(spec: JobSpecView, args: list[str]) -> tuple[PythonEntry | None, bool]:
    """What to run: (the in-process entry or None, whether the launch argv re-enters the launcher)."""
    if args:
        entry = entry_after_interpreter(args)
        if entry is None:
            raise LaunchError(f"re-entry arguments {args!r} are not a Python entry (-m module …, file.py …, -c code …)")
        return entry, False
    entry = python_entry(spec.launch.argv)
    reenters = any(marker in arg for arg in spec.launch.argv for marker in REENTRY_MARKERS)
    return entry, reenters


def _prepare(args: list[str], emit: Emit, supervised: bool = False) -> tuple[JobSpecView, PythonEntry | None, bool]:
    """(the JobSpec, the entry to run in this interpreter or None, whether argv starts re-entering ranks).

    `supervised`: this launcher only watches the trainer (a child that re-enters to install the
    plugins), so it verifies them and installs nothing itself."""
    work = work_dir()
    spec = read_jobspec(work)
    trusted_bytecode(work)
    _enter_cwd(work, spec.launch)
    entry, reenters = _plan(spec, args)
    # the plugin lines come from one process of the job: the ranks say them when they re-enter
    says = emit if speaks_for_job(os.environ) and not reenters else _quiet
    chosen = [p for p in spec.plugins if p.capability == LOADED_CAPABILITY]
    if chosen and entry is None and not reenters:
        raise LaunchError(
            f"algorithm plugins apply in the entrypoint process, but launch.argv {spec.launch.argv!r} "
            f"is not a Python entry for this interpreter ({sys.executable}) and does not re-enter "
            "tuneplane.launcher; start each rank as `python -m tuneplane.launcher -m <module> …` "
            "(or `… <file.py> …`)"
        )
    in_process = entry is not None and (bool(chosen) or spec.launch.in_process)
    if supervised and in_process:
        for plugin in chosen:  # fail here, before the child starts; the child installs them and says so
            _verify_only(work, plugin)
        return spec, entry, False
    if supervised and not (reenters and chosen):
        loaded_plugins(spec, says)  # no rank installs plugins here; ranks that re-enter name the skipped
        return spec, None, reenters
    if chosen and (entry is None or supervised):
        for plugin in chosen:  # fail before starting the ranks; each rank installs on re-entry
            _verify_only(work, plugin)
        emit(f"launcher: {len(chosen)} plugin(s) verified; each rank installs them on re-entry")
        return spec, None, True
    install_plugins(spec, work, says)
    in_process = entry is not None and (bool(args) or bool(chosen) or spec.launch.in_process)
    return spec, entry if in_process else None, False


def _emit(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Console script `tuneplane-launch`; see the module docstring."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if args[:1] in (["-h"], ["--help"]):
        return print_or_quit(__doc__ or "", "tuneplane-launch")
    # The node's launcher (not a rank re-entering) tells the trainer its attempt and where to resume,
    # and, in a run directory, records the attempt and watches the trainer as a child.
    record = None if args else JobAttempt.from_env()
    if not args:
        export_attempt_env(attempt=None if record is None else record.attempt)
    if record is not None:
        record.begin()
    try:
        spec, entry, ranks = _prepare(args, _emit, supervised=record is not None)
    except LaunchError as exc:
        return _refused(exc, record)
    _show_own_launch(args, spec)
    # Node rank zero collects for the job (tuneplane.collector): native files beside the trainer,
    # then what the SDK left unsent.
    uploads = bool(_collector("take_job", False))
    if uploads:  # an earlier attempt's leftovers first, so they never replace this attempt's points
        _collector("collect_before", None, os.environ, BEFORE_JOB_UPLOAD_SECONDS)
    collector = _collector("start_beside", None) if uploads else None
    if record is not None:
        return _run_recorded(record, spec, entry, collector, uploads)
    if entry is not None:
        try:
            run_python_entry(entry)
        finally:
            if uploads:
                _collector("finish_in_process_report", None)  # what it could not deliver is on disk now
            _collector("end_job", None, collector, uploads, AFTER_JOB_UPLOAD_SECONDS)
        return 0
    if ranks or uploads:
        # A child, not exec: a rank's refusal must end the job as 78 with its line, not torchrun's;
        # and in a pod this process is the container's first: after the job it makes the
        # collector's last pass and uploads what the SDK left unsent (no backend does that on a
        # cluster), and its exit would kill both. Signals are passed on to the child.
        try:
            code, line = run_child(spec.launch.argv)
        finally:
            _collector("end_job", None, collector, uploads, AFTER_JOB_UPLOAD_SECONDS)
        if line:
            report_failure(line)
            return CONFIG_ERROR_EXIT
        return code
    exec_argv(spec.launch.argv)


def _show_own_launch(args: list[str], spec: JobSpecView) -> None:
    """The log starts with the person's own launch line (`bash train.sh`'s exec), once per node."""
    shown = args or os.environ.pop(launchline.SHOWN_ENV, "")  # a rank, or a backend already wrote it
    own = None if shown else launchline.own_launch_line(spec.launch.argv, str(work_dir()))
    if own:
        _emit(own)


def _refused(exc: LaunchError, record: JobAttempt | None) -> int:
    line = f"tuneplane-launch: error: {exc}"
    report_failure(line)
    if record is not None:
        record.end(Outcome(CONFIG_ERROR_EXIT, None, [line], [], line), termination=False)
    return CONFIG_ERROR_EXIT


def _run_recorded(
    record: JobAttempt, spec: JobSpecView, entry: PythonEntry | None, collector: Any, uploads: bool
) -> int:
    """Run the trainer as a watched child (an in-process entry re-enters this launcher in the child,
    which installs the plugins there) and record how it ended."""
    child = spec.launch.argv if entry is None else reentry_argv(entry)
    try:
        outcome = supervise(child, work_dir() / LAUNCH_ERROR_FILE)
    except FileNotFoundError:
        outcome = Outcome(127, None, [], [], f"tuneplane-launch: error: cannot start {child[0]!r}: command not found")
    except OSError as exc:
        outcome = Outcome(126, None, [], [], f"tuneplane-launch: error: cannot start {child[0]!r}: {exc}")
    finally:
        _collector("end_job", None, collector, uploads, AFTER_JOB_UPLOAD_SECONDS)
    if outcome.refusal:
        report_failure(outcome.refusal)
    code = CONFIG_ERROR_EXIT if outcome.refusal and outcome.code not in (126, 127) else outcome.code
    outcome = outcome.replace(code=code)  # the GPU watchdog's finding and reason kept
    record.end(outcome, termination=not outcome.refusal)
    return code


# ── resuming ─────────────────────────────────────────────────────────────────────────────────────────


def export_attempt_env(environ: MutableMapping[str, str] | None = None, attempt: int | None = None) -> None:
    """TUNEPLANE_ATTEMPT (`attempt`, the one this node records; else the environment's), and
    TUNEPLANE_RESUME_FROM when a complete checkpoint exists (else unset)."""
    env = os.environ if environ is None else environ
    env[ATTEMPT_ENV] = str(attempt or attempts.attempt_number(env))
    out = env.get(OUT_DIR_ENV, "")
    newest = newest_complete(out) if out else None
    if newest is None:
        env.pop(RESUME_FROM_ENV, None)
    else:
        env[RESUME_FROM_ENV] = str(newest)
        print(f"launcher: attempt {env[ATTEMPT_ENV]} resumes from {newest}", flush=True)


def run_child(argv: list[str]) -> tuple[int, str]:
    """`argv` as a child, with signals passed on: its exit code (127/126 when it cannot start)."""
    try:
        return run_ranks(argv, work_dir() / LAUNCH_ERROR_FILE)
    except FileNotFoundError:
        _fail(f"cannot start {argv[0]!r}: command not found", 127)
    except OSError as exc:
        _fail(f"cannot start {argv[0]!r}: {exc}", 126)


def _collector(name: str, failed: Any, *args: Any) -> Any:
    """`tuneplane.collector.<name>(*args)`, or `failed` when it raises."""
    try:
        # lazy: read only once the plugins are verified (a refused job exits before needing it)
        import tuneplane.collector as collector

        return getattr(collector, name)(*args)
    except Exception as exc:  # metrics are a side channel: never stop the job for them
        print(f"tuneplane-launch: metrics collector: {name}: {exc}", file=sys.stderr, flush=True)
        return failed


if __name__ == "__main__":
    sys.exit(main())
