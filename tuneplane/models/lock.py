"""`recipe.lock.json` (CONTRACT §4), and the StarForge lock versions we still read."""

from typing import Literal

from pydantic import Field

from tuneplane.models.base import DIGEST_RE, EditorSchema, Strict, empty_dict

RECIPE_LOCK_API = "tuneplane/recipe-lock/v1"
LEGACY_LOCK_APIS = ("forge/recipe-lock/v2", "forge/recipe-lock/v3", "forge/recipe-lock/v4")


class LockedRecipe(Strict):
    name: str
    version: str
    digest: str = Field(pattern=DIGEST_RE)
    manifest_digest: str = Field(pattern=DIGEST_RE)
    template_digest: str = Field(pattern=DIGEST_RE)


class LockedFramework(Strict):
    kind: str
    version: str = Field(description="The selected runtime key, or `user-managed`.")
    runtime_id: str = ""


class CreatedBy(Strict):
    core_version: str


class LockRequires(Strict):
    core: str


class ParamBinding(Strict):
    path: str
    type: str


class EntrypointBinding(Strict):
    kind: str
    value: str


class Bindings(Strict):
    params: dict[str, ParamBinding] = Field(default_factory=empty_dict)
    entrypoint: EntrypointBinding | None = None


class RecipeLock(Strict):
    api_version: Literal[
        "tuneplane/recipe-lock/v1", "forge/recipe-lock/v2", "forge/recipe-lock/v3", "forge/recipe-lock/v4"
    ] = Field(alias="apiVersion")
    recipe: LockedRecipe
    framework: LockedFramework
    created_by: CreatedBy
    requires: LockRequires
    bindings: Bindings | None = None
    schema_ref: EditorSchema = None

    @property
    def legacy(self) -> bool:
        return self.api_version != RECIPE_LOCK_API
