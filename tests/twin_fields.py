"""Field ownership for the cluster twin's server-side apply, as the API server tracks it.

A field is a path of map keys; lists are atomic (a real server merges some lists by key, e.g.
containers by name: the twin does not, see docs/architecture.md). Each manager owns a set of paths:

- an apply by manager `m` owns exactly the fields it sent; a field `m` owned before and does not send
  now is removed from the object, unless another manager owns it too;
- a field another manager owns with a different value is a conflict (409) unless `force=true`, which
  moves the ownership to `m`;
- creates, updates and merge patches make their manager own what they set (operation `Update`).
"""

from __future__ import annotations

import copy
from typing import Any

Path = tuple[str, ...]
_SKIP_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "deletionTimestamp",
        "selfLink",
    }
)
MISSING = object()


def leaves(obj: Any, prefix: Path = ()) -> set[Path]:
    """The field paths an object sets; `status` and server-owned metadata excluded."""
    out: set[Path] = set()
    if isinstance(obj, dict) and not obj:
        # an empty map owns itself only where it means something (`emptyDir: {}`), never its children
        return {prefix} if prefix and prefix[-1] not in ("labels", "annotations") else out
    if not isinstance(obj, dict):
        return {prefix} if prefix else out
    for key, value in obj.items():
        if not prefix and key in ("apiVersion", "kind", "status"):
            continue
        if prefix == ("metadata",) and key in _SKIP_META:
            continue
        out |= leaves(value, (*prefix, key))
    return out


def get(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return MISSING
        obj = obj[key]
    return obj


def remove(obj: dict[str, Any], path: Path) -> None:
    """Delete `path` and any map it leaves empty."""
    parents = []
    node: Any = obj
    for key in path[:-1]:
        if not isinstance(node, dict) or key not in node:
            return
        parents.append((node, key))
        node = node[key]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    for parent, key in reversed(parents):
        if parent[key] == {}:
            del parent[key]
        else:
            break


def merge(target: dict[str, Any], applied: dict[str, Any]) -> dict[str, Any]:
    """Maps merge recursively, anything else (lists included) replaces."""
    out = copy.deepcopy(target)
    for key, value in applied.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def overlaps(a: Path, b: Path) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    """The `fieldsV1` form of `metadata.managedFields` (`{"f:spec": {"f:x": {}}}`)."""
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return root


class Conflict(Exception):
    def __init__(self, conflicts: list[tuple[str, Path]]) -> None:
        self.conflicts = conflicts
        lines = "\n".join(f'- conflict with "{m}": .{".".join(p)}' for m, p in conflicts)
        super().__init__(f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) != 1 else ''}:\n{lines}")


def apply(
    current: dict[str, Any], owners: dict[str, set[Path]], manager: str, applied: dict[str, Any], force: bool
) -> tuple[dict[str, Any], dict[str, set[Path]]]:
    """(the object after the apply, the new ownership); raises Conflict."""
    sent = leaves(applied)
    conflicts = []
    for other, paths in owners.items():
        if other == manager:
            continue
        for path in sent:
            for owned in paths:
                if (
                    overlaps(path, owned)
                    and get(current, owned) != get(applied, owned)
                    and get(applied, owned) is not MISSING
                ):
                    conflicts.append((other, owned))
    if conflicts and not force:
        raise Conflict(sorted(set(conflicts)))
    new_owners = {m: set(p) for m, p in owners.items()}
    if force:
        for other in new_owners:
            if other != manager:
                new_owners[other] = {p for p in new_owners[other] if not any(overlaps(p, s) for s in sent)}
    result = copy.deepcopy(current)
    for gone in owners.get(manager, set()) - sent:
        if not any(overlaps(gone, p) for m, ps in new_owners.items() if m != manager for p in ps):
            remove(result, gone)
    result = merge(result, applied)
    new_owners[manager] = sent
    return result, {m: p for m, p in new_owners.items() if p}


def update(
    owners: dict[str, set[Path]], manager: str, before: dict[str, Any], after: dict[str, Any]
) -> dict[str, set[Path]]:
    """An Update operation: `manager` takes the fields it changed or added."""
    changed = {p for p in leaves(after) if get(before, p) != get(after, p)}
    new_owners = {
        m: {p for p in ps if get(after, p) is not MISSING and not any(overlaps(p, c) for c in changed)}
        for m, ps in owners.items()
        if m != manager
    }
    mine = {p for p in owners.get(manager, set()) if get(after, p) is not MISSING} | changed
    new_owners[manager] = mine
    return {m: p for m, p in new_owners.items() if p}
