"""`recipe.yaml`: one catalog method, its params, runtimes and adapter options (CONTRACT §2)."""

from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from tuneplane.constants import NAME_PATTERN, Scalar
from tuneplane.models.base import Strict, defaults_of, empty_dict, empty_list

ParamType = Literal["int", "float", "bool", "str", "enum"]


class Param(Strict):
    type: ParamType
    path: str = Field(description="Dotted path in config.yaml the value lands on.")
    doc: str = ""
    group: str = ""
    required: bool = False
    default: Any = None
    min: float | None = None
    max: float | None = None
    exclusive_min: bool = False
    choices: list[Any] | None = None
    when: str = Field(
        "",
        description="The name of a bool parameter: this one reaches the job only while that one is true "
        "(lora_r only with use_peft on; a parameter may name itself). Empty: always.",
    )

    @model_validator(mode="after")
    def _enum_has_choices(self) -> Self:
        if self.type == "enum" and not self.choices:
            raise ValueError("an enum param needs `choices`")
        return self


class Entrypoint(Strict):
    """What a train run starts: a file of the experiment, or a module or file of the framework in the image."""

    kind: Literal["module", "file", "experiment"] = Field(
        description="experiment: a file of the experiment; module: a module of the image; "
        "file: a file of the framework inside the image, relative to the runtime's `root`."
    )
    value: str
    experiment_override: str = Field(
        "",
        description="An experiment file (e.g. run.py) started instead, with the same arguments, "
        "when the experiment has it.",
    )
    flags: list[str] = Field(
        default_factory=empty_list,
        description="The command-line flags the entrypoint accepts (for an experiment's file: what the "
        "template shipped, which a lab's own copy may not outgrow); the adapter passes no other. "
        "Empty: every flag the framework's adapter writes.",
    )


class AdapterOptions(Strict):
    observability: Literal["platform", "external"]
    orchestrator: Literal["", "process-group", "ray"] = ""
    launcher: Literal["", "torchrun", "accelerate", "python-module"] = ""
    config_mode: str = ""
    bindings: dict[str, str] = Field(default_factory=empty_dict)
    topology: dict[str, Any] = Field(default_factory=empty_dict)
    platform_owned: list[str] = Field(default_factory=empty_list)
    required_inputs: list[Literal["model", "train_data", "validation_data"]] = Field(default_factory=empty_list)


class ConfigPolicy(Strict):
    """How `tp validate` reads the experiment's config.yaml."""

    mode: Literal["open", "closed", "user"] = Field(
        "open",
        description="closed: every key is a parameter or a pass-through key (anything else is an "
        "error); open: other keys are kept; user: the file is the user's own, never parsed.",
    )
    target: str = Field("", description="What consumes the config, e.g. trl.SFTConfig (for people and tests).")
    passthrough: list[str] = Field(
        default_factory=empty_list, description="Keys beyond the params that the framework or the template reads."
    )


class NativeOutput(Strict):
    """A metrics file the framework writes under the out dir, read by the native collector."""

    format: Literal["tensorboard", "jsonl"]
    path: str = Field(
        min_length=1,
        max_length=512,
        description="Relative to the out dir: a TensorBoard log directory or a JSON-lines file.",
    )
    key: str | None = Field(None, description="JSON lines, one point per line: the field holding the name.")
    step: str = Field("step", description="JSON lines: the field holding the step.")
    value: str = Field("value", description="JSON lines, one point per line: the field holding the value.")
    values: str | None = Field(None, description="JSON lines, wide: the field holding an object of metrics.")
    prefix: str = Field("", description="Put before every key.")

    @field_validator("path")
    @classmethod
    def _inside_out_dir(cls, path: str) -> str:
        parts = path.replace("\\", "/").split("/")
        if path.startswith(("/", "\\", "~")) or ".." in parts or "\0" in path:
            raise ValueError(f"path {path!r} must stay inside the out dir: relative to it, without '..' (e.g. logs/tb)")
        return path

    @property
    def where(self) -> str:
        """The path as the collector resolves it (`./logs/tb/` and `logs/tb` name one output)."""
        return "/".join(p for p in self.path.replace("\\", "/").split("/") if p not in ("", ".")) or "."


def merge_native(recipe: list[NativeOutput], experiment: list[NativeOutput]) -> list[NativeOutput]:
    """The outputs a job's collector reads: the recipe's, then the experiment's. The experiment extends
    the recipe's list, and where both declare the same path the experiment's entry wins (its format,
    mapping and prefix replace the recipe's)."""
    own = {o.where for o in experiment}
    return [o for o in recipe if o.where not in own] + list(experiment)


class Metrics(Strict):
    primary: list[str] = Field(default_factory=empty_list)
    aliases: dict[str, str] = Field(default_factory=empty_dict)
    native: list[NativeOutput] = Field(
        default_factory=empty_list,
        max_length=64,
        description="Native metric files the collector sends (docs/reference/collector.md).",
    )


class Artifacts(Strict):
    version: Literal["tuneplane/artifacts/v1"] = "tuneplane/artifacts/v1"
    checkpoints: list[str] = Field(default_factory=lambda: ["checkpoints/*"])
    logs: list[str] = Field(default_factory=lambda: ["logs"])
    exports: list[str] = Field(default_factory=lambda: ["hf_export"])
    evaluations: list[str] = Field(default_factory=lambda: ["eval/report.json"])
    formats: dict[str, str] = Field(default_factory=empty_dict)


class RuntimeVersion(Strict):
    runtime_id: str
    requires: str = ""
    image: str = ""
    root: str = Field(
        "", description="Where the framework's source tree sits in the image; a `file` entrypoint is relative to it."
    )
    deprecated: bool = Field(
        False, description="Still admitted for existing locks, with a warning; not offered to new experiments."
    )


class Runtime(Strict):
    default_version: str
    versions: dict[str, RuntimeVersion] = Field(default_factory=empty_dict)


class Requires(Strict):
    core: str = ">=0.1,<1"


RULE_ID_RE = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
# The inputs a rule may name beside config paths: each reaches the config at its binding
RULE_INPUTS = ("model", "train_data", "validation_data")


class RuleCondition(Strict):
    """`when: {key: algo.advantage.estimator, in: [gae]}`: the rule applies when the key has one of the values."""

    key: str = Field(
        min_length=1, description="A dotted config path or an input name (model, train_data, validation_data)."
    )
    in_: list[Scalar] = Field(alias="in", min_length=1, description="The values for which the rule applies.")


class RecipeRule(Strict):
    """A cross-field requirement of the framework, checked on the run's effective config (config.yaml,
    the parameters' defaults and `--set` values, the bound inputs) by `tp validate`, `tp render` and
    `tp submit` alike. A key counts as set when it has a value other than null, empty text, an empty
    list or mapping, or false (a switch left off)."""

    id: str = Field(pattern=RULE_ID_RE, max_length=64, description="Named in every report of the rule.")
    when: str | RuleCondition = Field(
        "",
        description="Empty: always. A config path or input name: when it is set. A mapping "
        "`{key, in}`: when the key's value is one of `in`.",
    )
    require_any: list[str] = Field(min_length=1, description="Config paths or input names; at least one must be set.")
    message: str = Field(min_length=1, description="What the framework does when the rule is broken.")
    hint: str = Field("", description="How to fix it; the keys to set are named after it.")
    severity: Literal["error", "warning"] = "error"


class Recipe(Strict):
    """A catalog recipe. `name` is the method id `<framework>/<recipe>`."""

    name: str = Field(pattern=rf"^{NAME_PATTERN}/{NAME_PATTERN}$")
    version: str
    framework: str
    title: str = ""
    summary: str = ""
    category: str = ""
    template: str = "template"
    entrypoint: Entrypoint
    adapter_options: AdapterOptions
    roles: list[str] = Field(default_factory=lambda: ["trainer"])
    plugins: list[str] = Field(default_factory=empty_list)
    lifecycle: dict[Literal["export", "eval"], str] = Field(default_factory=empty_dict)
    lifecycle_resources: dict[Literal["export", "eval"], int] = Field(default_factory=empty_dict)
    metrics: Metrics = Field(default_factory=defaults_of(Metrics))
    artifacts: Artifacts = Field(default_factory=defaults_of(Artifacts))
    runtime: Runtime
    requires: Requires = Field(default_factory=defaults_of(Requires))
    params: dict[str, Param] = Field(default_factory=empty_dict)
    config: ConfigPolicy = Field(default_factory=defaults_of(ConfigPolicy))
    rules: list[RecipeRule] = Field(
        default_factory=empty_list,
        max_length=64,
        description="Cross-field requirements of the framework (docs/reference/files.md).",
    )

    @model_validator(mode="after")
    def _when_names_a_switch(self) -> Self:
        for name, param in self.params.items():
            switch = self.params.get(param.when) if param.when else None
            if param.when and (switch is None or switch.type != "bool"):
                raise ValueError(f"params.{name}.when: {param.when!r} is not a bool parameter of this recipe")
        return self

    @model_validator(mode="after")
    def _rule_ids_unique(self) -> Self:
        ids = [r.id for r in self.rules]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"rule id(s) used twice: {', '.join(twice)}")
        return self

    @property
    def method(self) -> str:
        return self.name

    @property
    def user_managed(self) -> bool:
        return self.runtime.default_version == "user-managed"
