"""`tp methods [ID]`: the catalog, or one recipe's parameters."""

from __future__ import annotations

from typing import Annotated

import typer

from tuneplane.cli.say import say


def register(app: typer.Typer) -> None:
    app.command("methods", help="List catalog methods, or show one method's parameters.")(methods)


def methods(method: Annotated[str | None, typer.Argument(help="FRAMEWORK/RECIPE to show.")] = None) -> None:
    # lazy: tp builds only the invoked command, so only it pays for these
    from tuneplane.cli.tables import table
    from tuneplane.lab.catalog import load_catalog

    catalog = load_catalog()
    if method is None:
        rows = []
        for mid in catalog.ids:
            r = catalog.recipe(mid)
            versions = r.runtime.default_version
            rows.append([mid, r.category, versions, r.title])
        say.line(table(["method", "category", "default version", "title"], rows))
        say.line("details: tp methods FRAMEWORK/RECIPE")
        return
    catalog.require(method)
    r = catalog.recipe(method)
    say.line(f"{r.name} {r.version}: {r.title}\n{r.summary}\n")
    say.line(f"entrypoint: {r.entrypoint.kind} {r.entrypoint.value}   "
               f"observability: {r.adapter_options.observability}")
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
