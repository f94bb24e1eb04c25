"""The recipe catalog: `catalog/<framework>/<recipe>/recipe.yaml` + `template/`.

Listing the catalog reads directory names only; a recipe is parsed, and its digests computed, the first
time something asks for it, then kept for the life of the process.
"""

from __future__ import annotations

import os
from functools import cached_property
from importlib.util import find_spec
from pathlib import Path

from tuneplane.errors import UsageError
from tuneplane.models.recipe import Recipe
from tuneplane.problems import did_you_mean
from tuneplane.runtime.digest import bundle_digest, manifest_digest, tree_digest

CATALOG_ENV = "TUNEPLANE_CATALOG"


def packaged_catalog_root() -> Path:
    """The catalog shipped with tp: a directory on disk in a wheel and in an editable checkout alike.
    Found by its package spec, not importlib.resources, which would import zipfile into every `tp validate`."""
    spec = find_spec("tuneplane._data.catalog")
    assert spec is not None and spec.submodule_search_locations, "tp is installed without its catalog"
    return Path(next(iter(spec.submodule_search_locations)))


class Catalog:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._recipes: dict[str, Recipe] = {}
        self._digests: dict[str, tuple[str, str, str]] = {}

    @cached_property
    def ids(self) -> list[str]:
        found = []
        for fw in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
            for rc in sorted(fw.iterdir()):
                if (rc / "recipe.yaml").is_file():
                    found.append(f"{fw.name}/{rc.name}")
        return found

    def has(self, method: str) -> bool:
        return method in self.ids

    def require(self, method: str) -> None:
        if self.has(method):
            return
        hint = did_you_mean(method, self.ids, cutoff=0.5) or f"known methods: {', '.join(self.ids)}"
        raise UsageError(f"unknown method {method!r}", hint=hint + " (see `tp methods`)")

    def recipe_dir(self, method: str) -> Path:
        return self.root.joinpath(*method.split("/", 1))

    def recipe(self, method: str) -> Recipe:
        if method not in self._recipes:
            self.require(method)
            self._recipes[method] = _load_recipe(self.recipe_dir(method) / "recipe.yaml", method)
        return self._recipes[method]

    def template_dir(self, method: str) -> Path:
        return self.recipe_dir(method) / self.recipe(method).template

    def digests(self, method: str) -> tuple[str, str, str]:
        """(digest, manifest_digest, template_digest) of the current catalog entry."""
        if method not in self._digests:
            m = manifest_digest(self.recipe_dir(method) / "recipe.yaml")
            t = tree_digest(self.template_dir(method))
            self._digests[method] = (bundle_digest(m), m, t)
        return self._digests[method]


def _load_recipe(path: Path, method: str) -> Recipe:
    # lazy: pydantic and the YAML loader load when a recipe is read, not when the catalog is listed
    from tuneplane.lab.modelparse import first_problem_error, parse_model
    from tuneplane.lab.yamlio import LoadFailed, load_yaml

    try:
        doc = load_yaml(path, f"catalog/{method}/recipe.yaml")
    except LoadFailed as exc:
        raise first_problem_error([exc.problem], prefix="broken catalog recipe: ") from None
    recipe, problems = parse_model(Recipe, doc, "recipe-schema")
    if recipe is None:
        raise first_problem_error(problems[:1], prefix="broken catalog recipe: ")
    if recipe.name != method:
        raise UsageError(f"catalog recipe at {method} names itself {recipe.name!r}")
    return recipe


_CATALOGS: dict[Path, Catalog] = {}


def load_catalog(root: Path | None = None) -> Catalog:
    """The catalog in force: `root`, else $TUNEPLANE_CATALOG, else the packaged one. Cached per root."""
    if root is None:
        env = os.environ.get(CATALOG_ENV)
        root = Path(env) if env else packaged_catalog_root()
    if root not in _CATALOGS:
        if not root.is_dir():
            raise UsageError(f"recipe catalog not found at {root}", hint=f"check ${CATALOG_ENV}")
        _CATALOGS[root] = Catalog(root)
    return _CATALOGS[root]
