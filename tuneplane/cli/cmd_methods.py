"""`tp methods [ID]`: the catalog, or one recipe's parameters."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tuneplane.cli.say import say


def register(app: typer.Typer) -> None:
    app.command("methods", help="List catalog methods, or show one method's parameters.")(methods)


def methods(
    method: Annotated[str | None, typer.Argument(help="FRAMEWORK/RECIPE to show.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (see the JSON outputs reference).")] = False,
) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.cli.tables import table
    from tuneplane.lab.catalog import load_catalog

    catalog = load_catalog()
    if method is None:
        listed = [
            {"method": mid, "category": r.category, "default_version": r.runtime.default_version, "title": r.title}
            for mid, r in ((mid, catalog.recipe(mid)) for mid in catalog.ids)
        ]
        if as_json:
            say.json(listed)
            return
        say.line(table(["method", "category", "default version", "title"], [list(m.values()) for m in listed]))
        say.line("details: tp methods FRAMEWORK/RECIPE")
        return
    catalog.require(method)
    r = catalog.recipe(method)
    if as_json:
        say.json(_method_data(method, r))
        return
    say.line(f"{r.name} {r.version}: {r.title}\n{r.summary}\n")
    say.line(f"entrypoint: {r.entrypoint.kind} {r.entrypoint.value}   observability: {r.adapter_options.observability}")
    if r.runtime.versions:
        vs = ", ".join(f"{k}{' (deprecated)' if v.deprecated else ''}" for k, v in sorted(r.runtime.versions.items()))
        say.line(f"framework versions: {vs} (default {r.runtime.default_version})")
    if r.adapter_options.required_inputs:
        flags = " ".join("--" + i.replace("_", "-") for i in r.adapter_options.required_inputs)
        say.line(f"required inputs: {flags}")
    if not r.params:
        say.line("\nno parameters: config.yaml is yours and nothing reads it")
        return
    rows = [[name, p.type, _bounds(p), _show(p.default), p.path, p.doc] for name, p in sorted(r.params.items())]
    say.line("\n" + table(["param", "type", "allowed", "default", "config path", "what it does"], rows))


def _show(value: object) -> str:
    return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _bounds(p: object) -> str:
    choices = getattr(p, "choices", None)
    if choices:
        return "|".join(map(str, choices))
    lo, hi = getattr(p, "min", None), getattr(p, "max", None)
    if lo is None and hi is None:
        return ""
    left = "(" if getattr(p, "exclusive_min", False) else "["
    return f"{left}{_num(lo) if lo is not None else '-inf'}, {_num(hi) if hi is not None else 'inf'}]"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _method_data(method: str, r: Any) -> dict[str, Any]:
    """One method as `tp methods FRAMEWORK/RECIPE --json` prints it."""
    return {
        "method": method,
        "name": r.name,
        "version": r.version,
        "title": r.title,
        "summary": r.summary,
        "entrypoint": {"kind": r.entrypoint.kind, "value": r.entrypoint.value},
        "observability": r.adapter_options.observability,
        "default_version": r.runtime.default_version,
        "framework_versions": [
            {"version": k, "deprecated": bool(v.deprecated)} for k, v in sorted(r.runtime.versions.items())
        ],
        "required_inputs": list(r.adapter_options.required_inputs),
        "params": [
            {
                "name": name,
                "type": p.type,
                "allowed": _bounds(p),
                "default": p.default,
                "config_path": p.path,
                "doc": p.doc,
            }
            for name, p in sorted(r.params.items())
        ],
    }
