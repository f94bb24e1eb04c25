"""Start a framework CLI module with config.yaml rendered as its command-line flags (job side).

    python -m tuneplane.lifecycle.cli_flags --style flat|dotted --config <exp>/config.yaml \
        --overrides-json '<validated hyperparams>' --platform-json '<flags the platform owns>' \
        [--resume-flag <flag>] -- <module | file.py>

ms-swift takes flat flags (`--key value`, a list as several values, a bool as true/false, a config
value as written: `eval_strategy: no` is `--eval_strategy no`, not false); OpenRLHF
takes dotted flags (`a: {b: 1}` is `--a.b 1`) whose bools are switches (true adds the flag, false
leaves it out). The hyperparameters are laid over the config, the platform's flags over both, and
the module runs in this interpreter as `python -m <module>` would. With --resume-flag, a new attempt
of the run that the launcher gave a checkpoint ($TUNEPLANE_RESUME_FROM) passes it as that flag (ms-swift's
`resume_from_checkpoint`); the path is known only in the job. Standard library at import;
PyYAML (the training image's) only to read the config.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

from tuneplane.constants import RESUME_FROM_ENV
from tuneplane.lifecycle.overrides import apply_overrides


def leaves(config: dict[str, object], prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, value) for every leaf of nested mappings, in file order."""
    out: list[tuple[str, object]] = []
    for key, value in config.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out += leaves(value, dotted)
        else:
            out.append((dotted, value))
    return out


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def build_flags(
    config: dict[str, object], overrides: dict[str, object], platform: dict[str, object], style: str
) -> list[str]:
    """The flags of the merged config; empty strings and nulls are left out (the framework's default)."""
    merged = json.loads(json.dumps(config))
    for source in (overrides, platform):
        apply_overrides(merged, source)
    argv: list[str] = []
    for key, value in leaves(merged):
        if value is None or value == "" or value == {}:
            continue
        if style == "dotted" and isinstance(value, bool):
            argv += [f"--{key}"] if value else []
        elif isinstance(value, list):
            argv += [f"--{key}", *(_scalar(v) for v in value)]
        else:
            argv += [f"--{key}", _scalar(value)]
    return argv


def _loader(yaml: Any, values_as_written: bool) -> Any:
    """A safe loader that keeps keys as written, as tp reads them (YAML 1.1 takes the key `on:` for
    true), and with `values_as_written` every plain scalar too: YAML 1.1 would give `eval_strategy: no`
    as false and `run_name: 007` as 7, but a flat flag is text to the framework, which parses it by the
    type it declares (null and empty values still mean "leave the flag out")."""

    class AsWritten(yaml.SafeLoader):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            self.flatten_mapping(node)
            return {
                k.value
                if isinstance(k, yaml.ScalarNode)
                else self.construct_object(k, deep=deep): self.construct_object(v, deep=deep)
                for k, v in node.value
            }

    for tag in ("bool", "int", "float") if values_as_written else ():
        AsWritten.add_constructor(f"tag:yaml.org,2002:{tag}", lambda loader, node: loader.construct_scalar(node))
    return AsWritten


def _load(path: Path, as_written: bool = False) -> dict[str, object]:
    import yaml  # lazy: PyYAML is in the training image, loaded only when a config file is read

    loader = _loader(yaml, as_written)
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) if path.is_file() else None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: the config must be a mapping of flags to values")
    return data


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        raise SystemExit("usage: cli_flags [options] -- <module>")
    cut = args.index("--")
    parser = argparse.ArgumentParser(prog="tuneplane.lifecycle.cli_flags")
    parser.add_argument("--style", choices=["flat", "dotted"], required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--overrides-json", default="{}")
    parser.add_argument("--platform-json", default="{}")
    parser.add_argument("--resume-flag", default="", help="the framework's flag for $TUNEPLANE_RESUME_FROM")
    opts = parser.parse_args(args[:cut])
    module = args[cut + 1]
    config = _load(opts.config, as_written=opts.style == "flat")
    platform = json.loads(opts.platform_json)
    resume = os.environ.get(RESUME_FROM_ENV, "")
    if opts.resume_flag and resume:
        platform[opts.resume_flag] = resume
    flags = build_flags(config, json.loads(opts.overrides_json), platform, opts.style)
    sys.argv = [module, *flags]
    if module.endswith(".py"):  # an experiment's run.py in place of the framework's module
        sys.path.insert(0, str(Path(module).resolve().parent))
        runpy.run_path(module, run_name="__main__")
    else:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
