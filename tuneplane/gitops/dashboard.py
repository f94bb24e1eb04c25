"""The dashboard, split so that one commit rewrites only what changed.

- `status/README.md`: the index. One line per experiment (runs, phases, latest run), the latest runs
  of the lab, the requests not yet run, and what the bot refused (a symlink, a request it cannot
  parse), so a person sees it on the git host.
- `status/<exp>/README.md`: one experiment: its counts, every run of its newest month, the charts of
  its latest finished runs (`<run-id>.svg`, written by the bot), links to the earlier months.
- `status/<exp>/<YYYY-MM>.md`: every run of that experiment started in that month, for each month
  but the newest (the experiment page is that month's page).

A page is rendered from the status files beside it; a run's month comes from its id, so a new run
touches the index and its experiment page, never the whole history: an experiment's pages are
paginated by month and a batch of new runs rewrites only the newest one. A month page is written
once the month is over (and again only when a run of it changes), which keeps every page of an
experiment's lifetime a single blob version per change.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from tuneplane.constants import RAN_TO_END
from tuneplane.lab.runs import DASHBOARD, RUNS_DIR, STATUS_DIR, RunKey
from tuneplane.metrics.vocab import Vocabulary

ICON = {
    "Submitted": "📨",
    "Pending": "⏳",
    "Running": "🏃",
    "Succeeded": "✅",
    "Failed": "❌",
    "Cancelled": "⛔",
}
SPARK = "▁▂▃▄▅▆▇█"
LATEST = 12  # runs looked at past the newest month for charts to embed
LATEST_LAB = 10  # rows of latest runs on the index
CHARTS = 3  # charts embedded on an experiment page
NOTE = "<!-- Written by `tp bot` from the status files beside it; edits here are overwritten. -->"
HEADER = "| run | method | profile | phase | started | duration | metric | files |"
RULE = "|:--|:--|:--|:--|:--|--:|:--|:--|"


def month_of(run_id: str) -> str:
    return f"{run_id[:4]}-{run_id[4:6]}"


def experiment_page_rel(exp: str) -> str:
    return f"{STATUS_DIR}/{exp}/README.md"


def month_page_rel(exp: str, month: str) -> str:
    return f"{STATUS_DIR}/{exp}/{month}.md"


def chart_rel(key: RunKey) -> str:
    return f"{STATUS_DIR}/{key.experiment}/{key.run_id}.svg"


# ── reading the files beside the pages ──────────────────────────────────────────────────────────


def run_ids(root: Path, exp: str) -> list[str]:
    """Run ids with a status file in `status/<exp>/`, oldest first (names only: no file is read)."""
    try:
        names = [e.name for e in os.scandir(Path(root) / STATUS_DIR / exp) if e.is_file(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n[: -len(".json")] for n in names if n.endswith(".json") and not n.startswith("."))


def read_raw(root: Path, key: RunKey) -> dict[str, Any] | None:
    """A status file as plain JSON (the dashboard of thousands of runs must not pay for validation)."""
    path = Path(root) / key.status_rel
    if path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def phase_counts(root: Path, exp: str) -> Counter[str]:
    return Counter(_phase(read_raw(root, RunKey(exp, r))) for r in run_ids(root, exp))


def _phase(data: dict[str, Any] | None) -> str:
    return str(data.get("phase", "?")) if data else "unreadable"


# ── pages ────────────────────────────────────────────────────────────────────────────────────────


def experiment_page(root: Path, exp: str, counts: Mapping[str, int]) -> str:
    """The experiment's page: its counts, every run of its newest month (newest first), the charts
    of its latest finished runs and links to the pages of the earlier months."""
    ids = run_ids(root, exp)
    newest = month_of(ids[-1]) if ids else ""
    shown = [r for r in reversed(ids) if month_of(r) == newest]
    rows = [(RunKey(exp, r), read_raw(root, RunKey(exp, r))) for r in shown]
    lines = [f"# {exp}", "", NOTE, "", _counts_line(counts), "", "[← all experiments](../README.md)", ""]
    if rows:
        lines += [f"## Runs of {newest}", "", HEADER, RULE]
        lines += [row(key, data, here=exp) for key, data in rows]
        lines.append("")
    charted = _charted(root, exp, ids, dict((key.run_id, data) for key, data in rows))
    if charted:
        lines += ["## Charts", ""]
        lines += [f"### `{k.run_id}`\n\n![metrics of {k.run_id}]({k.run_id}.svg)\n" for k in charted]
    months = sorted({month_of(r) for r in ids} - {newest}, reverse=True)
    if months:
        lines += ["## Earlier months", "", " · ".join(f"[{m}]({m}.md)" for m in months), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _charted(root: Path, exp: str, ids: list[str], known: Mapping[str, dict[str, Any] | None]) -> list[RunKey]:
    """The latest finished runs with a chart, newest first (at most `CHARTS`, looking at most
    `LATEST` runs back past the newest month: the page stays cheap in a lab of any size)."""
    out: list[RunKey] = []
    for number, run_id in enumerate(reversed(ids)):
        if len(out) >= CHARTS or (run_id not in known and number >= len(known) + LATEST):
            break
        key = RunKey(exp, run_id)
        if not (Path(root) / chart_rel(key)).is_file():
            continue
        data = known[run_id] if run_id in known else read_raw(root, key)
        if data and data.get("phase") in RAN_TO_END:
            out.append(key)
    return out


def month_page(root: Path, exp: str, month: str) -> str:
    ids = [r for r in reversed(run_ids(root, exp)) if month_of(r) == month]
    lines = [f"# {exp}: runs of {month}", "", NOTE, "", f"[← {exp}](README.md)", "", HEADER, RULE]
    lines += [row(RunKey(exp, r), read_raw(root, RunKey(exp, r)), here=exp) for r in ids]
    return "\n".join(lines) + "\n"


def index_page(
    root: Path,
    counts: Mapping[str, Mapping[str, int]],
    waiting: Iterable[tuple[RunKey, str]] = (),
    problems: Iterable[str] = (),
) -> str:
    total: Counter[str] = Counter()
    for c in counts.values():
        total.update(c)
    runs = sum(total.values())
    lines = ["# Runs", "", NOTE, "", f"**{runs} run{'s' if runs != 1 else ''}**"
             + (f" · {_phases(total)}" if total else ""), ""]
    waiting = sorted(waiting)
    if waiting:
        lines += ["## Waiting for the bot", "", "| run | experiment | state |", "|:--|:--|:--|"]
        lines += [f"| `{k.run_id}` | {_cell(k.experiment)} | {_cell(why)} — [request](../{k.request_rel}) |"
                  for k, why in waiting]
        lines.append("")
    problems = list(problems)
    if problems:
        lines += ["## Refused by the bot", ""] + [f"- ⚠️ {_cell(p)}" for p in problems] + [""]
    if counts:
        lines += ["## Experiments", "", "| experiment | runs | phases | latest run |", "|:--|--:|:--|:--|"]
        latest_lab: list[tuple[str, str]] = []
        for exp in sorted(counts):
            ids = run_ids(root, exp)
            latest_lab += [(r, exp) for r in ids[-LATEST_LAB:]]
            last = ids[-1] if ids else ""
            data = read_raw(root, RunKey(exp, last)) if last else None
            shown = f"`{last}` {_phase_text(data)}" if last else ""
            lines.append(f"| [{_cell(exp)}]({exp}/README.md) | {sum(counts[exp].values())} | "
                         f"{_cell(_phases(counts[exp]))} | {_cell(shown)} |")
        lines.append("")
        recent = sorted(latest_lab, reverse=True)[:LATEST_LAB]
        if recent:
            lines += ["## Latest runs", "", "| run | experiment | phase | duration | metric |",
                      "|:--|:--|:--|--:|:--|"]
            for run_id, exp in recent:
                data = read_raw(root, RunKey(exp, run_id)) or {}
                lines.append(f"| [`{run_id}`]({exp}/README.md) | {_cell(exp)} | {_cell(_phase_text(data, why=True))} | "
                             f"{duration_text(data.get('started_at'), data.get('finished_at'))} | "
                             f"{_cell(metric_cell(data))} |")
            lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def row(key: RunKey, data: dict[str, Any] | None, here: str = "") -> str:
    """One run as a table row (links relative to `status/<here>/`, or to `status/` when empty)."""
    up = "../../" if here else "../"
    status_link = f"{key.run_id}.json" if here else key.status_rel.removeprefix(STATUS_DIR + "/")
    links = f"[request]({up}{key.request_rel}) · [status]({status_link})"
    if data is None:
        return f"| `{key.run_id}` | | | ⚠️ unreadable | | | | {links} |"
    cells = [
        f"`{key.run_id}`",
        str(data.get("method") or ""),
        str(data.get("profile") or ""),
        _phase_text(data, why=True),
        short_time(data.get("started_at")),
        duration_text(data.get("started_at"), data.get("finished_at")),
        metric_cell(data, spark=False),  # the index's latest runs carry the sparkline
    ]
    return "| " + " | ".join(_cell(c) for c in cells) + f" | {links} |"


def _phase_text(data: dict[str, Any] | None, why: bool = False) -> str:
    if not data:
        return "⚠️ unreadable"
    phase = str(data.get("phase", ""))
    reason = str(data.get("reason") or "")
    text = f"{ICON.get(phase, '')} {phase}".strip() + (f" ({reason})" if reason and phase != "Succeeded" else "")
    if why and phase == "Failed":
        first = next((ln.strip() for ln in str(data.get("message") or "").splitlines() if ln.strip()), "")
        if first:
            text += ": " + (first if len(first) <= 120 else first[:119] + "…")
    return text


def _counts_line(counts: Mapping[str, int]) -> str:
    n = sum(counts.values())
    return f"**{n} run{'s' if n != 1 else ''}**" + (f" · {_phases(counts)}" if n else "")


def _phases(counts: Mapping[str, int]) -> str:
    return " · ".join(f"{n} {phase.lower()}" for phase, n in sorted(counts.items()) if n)


def _cell(text: str) -> str:
    """Text for one table cell: a pipe escaped, every line break (CommonMark ends a line at `\\r`
    too) a space, so a message can never split its row."""
    return " ".join(text.replace("|", "\\|").splitlines())


def short_time(value: Any) -> str:
    return str(value)[:16].replace("T", " ") if value else ""


def duration_text(start: Any, end: Any) -> str:
    """`12.3s` under a minute (`0.04s` under a tenth), `4m 05s` under an hour, `2h 07m` beyond."""
    try:
        seconds = max((_parse(end) - _parse(start)).total_seconds(), 0.0)
    except (TypeError, ValueError):
        return ""
    if seconds < 0.095:
        return f"{seconds:.2f}s"
    if seconds < 59.95:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def _parse(value: Any) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def metric_cell(data: dict[str, Any], vocab: Vocabulary | None = None, spark: bool = True) -> str:
    """The first metric in reading order (primary first), its last value and a sparkline."""
    metrics = data.get("metrics") or {}
    if not isinstance(metrics, dict) or not metrics:
        return ""
    key = (vocab or _vocabulary(str(data.get("method") or ""))).order(metrics)[0]
    value = metrics[key]
    history = (data.get("metric_history") or {}).get(key) or []
    text = f"{key} {value:.4g}" if isinstance(value, int | float) else f"{key} {value}"
    return f"{text} {sparkline(history)}".rstrip() if spark else text


@functools.lru_cache(maxsize=64)
def _vocabulary(method: str) -> Vocabulary:
    from tuneplane.gitops.observe import vocabulary_of  # lazy: the catalog is read once per method

    return vocabulary_of(method)


def sparkline(values: list[Any]) -> str:
    nums = [float(v) for v in values if isinstance(v, int | float) and v == v][-20:]
    if len(nums) < 2:
        return ""
    low, high = min(nums), max(nums)
    span = (high - low) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - low) / span * (len(SPARK) - 1) + 0.5))] for v in nums)


__all__ = ["DASHBOARD", "RUNS_DIR", "experiment_page", "index_page", "month_page", "row"]
