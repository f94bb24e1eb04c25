"""`--profile NAME[:TOTAL_GPUS]` → a node shape, by the rules of CONTRACT §7. Pure."""

from __future__ import annotations

from tuneplane.models.lab import LabFile, Profile
from tuneplane.problems import did_you_mean
from tuneplane.runtime.records import FrozenRecord


class Shape(FrozenRecord):
    profile: str
    nodes: int
    gpus_per_node: int
    local: bool
    procs_per_node: int = 0  # CPU processes of a GPU-less local profile (`local:N`); 0: one per GPU


class ShapeError(ValueError):
    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def parse_profile(text: str, lab: LabFile) -> Shape:
    name, sep, count_text = text.partition(":")
    profile = lab.profiles.get(name)
    if profile is None:
        known = sorted(lab.profiles)
        raise ShapeError(
            f"unknown profile {name!r}",
            did_you_mean(name, known, cutoff=0.5, then=f"profiles in tuneplane.yaml: {', '.join(known) or '(none)'}"),
        )
    if not sep:
        return _default_shape(name, profile)
    if not count_text.isdigit():
        raise ShapeError(
            f"profile {text!r}: the GPU count after ':' must be a whole number",
            f"for example {name}:{profile.gpus_per_node or 1}",
        )
    return _shape_for(name, profile, int(count_text))


def _default_shape(name: str, profile: Profile) -> Shape:
    if profile.default_gpus is not None:
        return _shape_for(name, profile, profile.default_gpus)
    return Shape(name, 1, profile.gpus_per_node, profile.local)


def _shape_for(name: str, p: Profile, total: int) -> Shape:
    gpn = p.gpus_per_node
    if total <= gpn:
        if total == 0 and gpn > 0 and not p.local:
            raise ShapeError(f"profile {name}:0 asks for no GPUs on a GPU profile", f"use {name}:1 or more")
        return Shape(name, 1, total, p.local)
    if gpn == 0 and p.local:
        return Shape(name, 1, 0, True, procs_per_node=total)  # local:N on a CPU machine: N processes
    if gpn == 0:
        raise ShapeError(
            f"profile {name!r} has no GPUs; {name}:{total} cannot be placed", f"use `--profile {name}` or a GPU profile"
        )
    if total % gpn:
        lower, upper = total // gpn * gpn, (total // gpn + 1) * gpn
        raise ShapeError(
            f"{total} GPUs do not fill whole {name} nodes of {gpn} GPUs",
            f"ask for at most {gpn} (one node) or a multiple of {gpn}, e.g. {lower or gpn} or {upper}",
        )
    nodes = total // gpn
    if nodes > p.max_nodes:
        raise ShapeError(
            f"{name}:{total} needs {nodes} nodes; the profile allows at most {p.max_nodes}",
            f"ask for at most {p.max_nodes * gpn} GPUs",
        )
    if p.local:
        raise ShapeError(f"the local profile {name!r} runs on one machine", f"ask for at most {gpn} GPUs")
    return Shape(name, nodes, gpn, p.local)
