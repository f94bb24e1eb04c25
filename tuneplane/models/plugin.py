"""plugin.yaml and plugins.lock.json as models (CONTRACT §5), with the names and patterns they use."""

import re
from typing import Literal, Self

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tuneplane.constants import NAME_PATTERN
from tuneplane.models.base import EditorSchema, Strict, defaults_of, empty_dict, empty_list
from tuneplane.models.recipe import Param

PLUGIN_SCHEMA = "tuneplane/plugin/v1"
LEGACY_SCHEMAS = ("lab-plugin/v1", "forge/plugin/v1")  # StarForge: read, warn, `tp migrate` rewrites
LOCK_API = "tuneplane/plugins-lock/v1"
LOCK_FILE = "plugins.lock.json"
MANIFEST_FILE = "plugin.yaml"
SEGMENT = NAME_PATTERN
ENTRYPOINT = r"[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*"
DIGEST = r"sha256:[0-9a-f]{64}"


class StrictModel(Strict):
    """What users write, and no type coercion either (a YAML 1.0 is not the string "1.0")."""

    model_config = ConfigDict(**Strict.model_config, strict=True)


def _specifier(value: str) -> str:
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f'{value!r} is not a PEP 440 version specifier (e.g. ">=0.1,<1")') from None
    return value


class PluginRequires(StrictModel):
    """What a plugin needs from the job that loads it."""

    core: str = Field("", description="PEP 440 specifier the running tuneplane must satisfy.")
    python: str = Field("", description="PEP 440 specifier for the job's Python.")
    frameworks: list[str] = Field(
        default_factory=empty_list, description="Frameworks the plugin supports; empty means any."
    )

    _check_core = field_validator("core", "python")(_specifier)

    @field_validator("frameworks")
    @classmethod
    def _framework_names(cls, value: list[str]) -> list[str]:
        bad = [f for f in value if not re.fullmatch(SEGMENT, f)]
        if bad:
            raise ValueError(f"not framework names: {', '.join(map(repr, bad))}")
        return value


PARAM_NAME = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class PluginParam(Param):
    """A plugin parameter: a recipe parameter's shape; its full dotted name is its key in params."""

    path: str = Field("", description="Unused for plugins: the name is the key install(params) reads.")
    when: Literal[""] = Field("", description="Unused for plugins: install(params) gets every value.")


class PluginManifest(StrictModel):
    """plugin.yaml: a versioned, digest-pinned extension package."""

    schema_: Literal["tuneplane/plugin/v1"] = Field(alias="schema", description="Always tuneplane/plugin/v1.")
    name: str = Field(pattern=f"^{SEGMENT}$", description="The plugin name; `install_deferred` takes it.")
    version: str = Field(pattern=f"^{SEGMENT}$", description="The plugin version, a string.")
    capability: Literal[
        "algorithm", "environment", "data-prep", "framework-integration", "recipe", "benchmark", "playbook", "prompt"
    ] = Field(description="What the plugin provides.")
    execution: Literal["local", "job"] | None = Field(
        None, description="data-prep only: runs on your machine (local) or in a job."
    )
    summary: str = Field("", description="One line saying what the plugin changes.")
    entrypoint: str | None = Field(
        None, pattern=f"^{ENTRYPOINT}$", description="module:function the launcher calls (algorithm)."
    )
    load: Literal["eager", "deferred"] = Field(
        "eager",
        description="eager: install(params) before training; deferred: the trainer calls "
        "tuneplane.plugins.install_deferred(name, **ctx).",
    )
    requires: PluginRequires = Field(default_factory=defaults_of(PluginRequires))
    scope: Literal["entrypoint"] = Field("entrypoint", description="Where it applies: the entrypoint.")
    params: dict[str, PluginParam] = Field(
        default_factory=empty_dict,
        description="Parameters the plugin reads from install(params), by full dotted "
        "name (opsd.scale); `tp submit --set` checks them.",
    )

    @field_validator("params")
    @classmethod
    def _param_names(cls, value: dict[str, PluginParam]) -> dict[str, PluginParam]:
        bad = [name for name in value if not re.match(PARAM_NAME, name)]
        if bad:
            raise ValueError(
                f"parameter names must be dotted Python names like opsd.scale, not {', '.join(map(repr, bad))}"
            )
        return value

    @model_validator(mode="after")
    def _capability_rules(self) -> Self:
        if self.capability == "data-prep" and self.execution is None:
            raise PydanticCustomError(
                "plugin_rule",
                "a data-prep plugin needs `execution: local` or `execution: job`",
                {"field": "capability"},
            )
        if self.capability != "data-prep" and self.execution is not None:
            raise PydanticCustomError(
                "plugin_rule",
                f"`execution` is only for data-prep; a {self.capability} plugin's location follows from its capability",
                {"field": "execution"},
            )
        if self.capability == "algorithm" and not self.entrypoint:
            raise PydanticCustomError(
                "plugin_rule", "an algorithm plugin needs `entrypoint: module:function`", {"field": "capability"}
            )
        return self

    @property
    def module(self) -> str:
        """The entrypoint's dotted module path ("" when there is none)."""
        return (self.entrypoint or "").partition(":")[0]


class PluginsLockEntry(StrictModel):
    id: str = Field(pattern=f"^{SEGMENT}/{SEGMENT}$", description="<owner>/<name>.")
    version: str = Field(pattern=f"^{SEGMENT}$")
    digest: str = Field(pattern=f"^{DIGEST}$", description="The plugin directory digest.")

    @property
    def name(self) -> str:
        return self.id.split("/", 1)[1]

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"


class PluginsLock(StrictModel):
    """experiments/<exp>/plugins.lock.json."""

    api_version: Literal["tuneplane/plugins-lock/v1"] = Field(alias="apiVersion")
    plugins: list[PluginsLockEntry] = Field(default_factory=empty_list)
    schema_ref: EditorSchema = None


def module_name_for(name: str) -> str:
    """The scaffold's module: unique per plugin so two plugins never import the same `patch`."""
    ident = re.sub(r"\W", "_", name)
    return f"{ident if ident[:1].isalpha() or ident[:1] == '_' else 'p_' + ident}_plugin"
