"""Find the lab on disk and load its files with positions. The first pipeline stage."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from tuneplane.constants import USER_ENV
from tuneplane.errors import UsageError
from tuneplane.lab.fs import LAB_FILE as LAB_FILE  # re-exported: callers import them from here
from tuneplane.lab.fs import LEGACY_LAB_FILE as LEGACY_LAB_FILE
from tuneplane.lab.fs import find_lab_root as find_lab_root
from tuneplane.lab.fs import present
from tuneplane.lab.layout import experiment_index, layout_problems
from tuneplane.lab.modelparse import first_problem_error, parse_model
from tuneplane.lab.yamlio import Doc, LoadFailed, load_yaml
from tuneplane.models.backendkinds import backend_kind
from tuneplane.models.base import name_error
from tuneplane.models.lab import LAB_API, LabFile
from tuneplane.problems import Problem, Severity, did_you_mean
from tuneplane.runtime.records import Record

LAB_DIRS = ("experiments", "plugins", "runs", "status")

# PyPI's `tuneplane` is another project: a newer tp comes from where the lab's CI installs it
UPGRADE_TP = "upgrade tp the way tool.requirement in tuneplane.yaml installs it (its repository or a wheel)"


class Lab(Record):
    # no __slots__: `experiment_index` is a cached_property, kept in the instance's __dict__
    _fields = ("root", "settings", "doc", "problems", "legacy")

    def __init__(
        self,
        root: Path,
        settings: LabFile | None,
        doc: Doc | None,
        problems: list[Problem] | None = None,
        legacy: bool = False,
    ) -> None:
        self.root = root
        self.settings = settings
        self.doc = doc
        self.problems: list[Problem] = [] if problems is None else problems
        self.legacy = legacy  # a StarForge lab (`starforge.yaml`), readable but to be migrated

    @property
    def name(self) -> str:
        return self.settings.name if self.settings else self.root.name

    def require_settings(self) -> LabFile:
        """The settings, or the error a command raises when tuneplane.yaml cannot be used: its first
        problem at its place (the bot's log and a person's terminal say the same)."""
        if self.settings is not None:
            return self.settings
        if not self.problems:
            raise UsageError(f"the lab settings cannot be read: {LAB_FILE}", hint="run `tp validate`")
        raise first_problem_error(
            self.problems, "run `tp validate` for every problem", prefix="the lab settings cannot be read: "
        )

    @property
    def config(self) -> LabFile:
        """The settings; a lab whose file is broken gets the defaults so other checks can still run."""
        if self.settings is not None:
            return self.settings
        return LabFile.model_validate({"apiVersion": LAB_API, "name": "lab"})

    def experiments_dir(self) -> Path:
        """The first experiment root: where `tp new` puts an experiment."""
        return self.root / self.config.experiment_roots[0] if self.config.experiment_roots else self.root

    @cached_property
    def experiment_index(self) -> dict[str, list[str]]:
        """Name → lab-relative directories of that name across the experiment roots."""
        return experiment_index(self.root, self.config)

    def experiment_names(self) -> list[str]:
        return sorted(self.experiment_index)

    def experiment_rel(self, name: str) -> str:
        """`experiments/<name>`, or `smoke/<name>` when it lives in another root."""
        dirs = self.experiment_index.get(name)
        if dirs:
            return dirs[0]
        return f"{self.config.experiment_roots[0] if self.config.experiment_roots else 'experiments'}/{name}"

    def experiment_dir(self, name: str) -> Path:
        return self.root / self.experiment_rel(name)

    def job_inputs(self) -> list[str]:
        """What a job's package is built from: a change there makes the lab dirty for a run."""
        return [LAB_FILE, *self.config.experiment_roots, "plugins", *self.config.shared_code]

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


def load_lab(root: Path | None = None) -> Lab:
    root = (
        find_lab_root(root)
        if root is None or not (present(root / LAB_FILE) or (root / LEGACY_LAB_FILE).is_file())
        else root.resolve()
    )
    if not present(root / LAB_FILE):
        return _legacy_lab(root)
    try:
        doc = load_yaml(root / LAB_FILE, LAB_FILE, root=root)
    except LoadFailed as exc:
        return Lab(root, None, None, [exc.problem])
    notes = list(doc.notes)
    problems = _version_first(doc)
    if problems:
        return Lab(root, None, doc, problems)
    settings, problems = parse_model(LabFile, doc, "lab-schema")
    if settings is not None:
        problems += _profile_names(doc, settings) + layout_problems(root, doc, settings)
        problems += _slurm_settings(doc, settings)
    return Lab(root, settings, doc, notes + problems)


def open_lab(root: Path | None = None) -> Lab:
    """The lab a command works in: `load_lab`, with settings it can use. A tuneplane.yaml that cannot be
    used raises the one error `Lab.require_settings` words, so every command says the same about it
    (`tp validate` alone loads the lab as it is, to list every problem)."""
    lab = load_lab(root)
    lab.require_settings()
    return lab


def _version_first(doc: Doc) -> list[Problem]:
    """Check apiVersion before anything else, so a newer file says 'upgrade tp', not noise."""
    if not isinstance(doc.data, dict):
        return [doc.problem("", "lab-schema", "tuneplane.yaml must be a mapping of settings")]
    api = doc.data.get("apiVersion")
    if api == LAB_API:
        return []
    if isinstance(api, str) and api.startswith("tuneplane/project/"):
        return [
            doc.problem(
                "/apiVersion",
                "lab-version",
                f"this lab uses {api}, newer than this tp understands",
                hint=UPGRADE_TP,
            )
        ]
    return [
        doc.problem(
            "/apiVersion",
            "lab-version",
            f"apiVersion must be {LAB_API} (got {api!r})",
            hint=f"set `apiVersion: {LAB_API}`",
        )
    ]


def _profile_names(doc: Doc, settings: LabFile) -> list[Problem]:
    return [
        doc.problem(
            f"/profiles/{name}",
            "lab-schema",
            f"profile name {name!r} is not a valid name",
            hint="use letters, digits, '.', '_' and '-'",
        )
        for name in settings.profiles
        if name_error(name)
    ]


def _slurm_settings(doc: Doc, settings: LabFile) -> list[Problem]:
    """`cluster.slurm` names only profiles that exist; a Slurm lab says where run directories live."""
    slurm = settings.cluster.slurm
    shared_filesystem = backend_kind(settings.cluster.backend).shared_filesystem
    problems = []
    for name in slurm.profiles:
        if name not in settings.profiles:
            problems.append(
                doc.problem(
                    f"/cluster/slurm/profiles/{name}",
                    "lab-slurm",
                    f"cluster.slurm.profiles names {name!r}, which is not a profile under `profiles:`",
                    hint=did_you_mean(name, settings.profiles) or f"profiles: {', '.join(settings.profiles)}",
                )
            )
    if shared_filesystem and not slurm.runs_root:
        problems.append(
            doc.problem(
                "/cluster/slurm",
                "lab-slurm",
                "cluster.slurm.runs_root is not set: run directories go under "
                f"cluster.storage.root ({settings.cluster.storage.root}), which every node must share",
                hint="set cluster.slurm.runs_root to a directory on the cluster's shared filesystem",
                severity=Severity.WARNING,
            )
        )
    if shared_filesystem and slurm.software.kind == "host" and not slurm.software.python_env:
        problems.append(
            doc.problem(
                "/cluster/slurm/software",
                "lab-slurm",
                "cluster.slurm.software.python_env is not set: jobs run "
                "the nodes' own python3, which needs tuneplane and your framework installed",
                hint="set python_env to the prefix of a virtualenv or conda env on the shared filesystem",
                severity=Severity.WARNING,
            )
        )
    return problems


def _legacy_lab(root: Path) -> Lab:
    problem = Problem(
        LEGACY_LAB_FILE,
        1,
        1,
        "starforge-lab",
        "this is a StarForge lab (starforge.yaml); tp reads it but the formats are outdated",
        hint="run `tp migrate` to convert it to a TunePlane lab",
    )
    return Lab(root, None, None, [problem], legacy=True)


def storage_user(lab: Lab) -> str:
    return lab.config.cluster.user or os.environ.get(USER_ENV) or os.environ.get("USER") or "user"
