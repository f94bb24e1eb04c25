"""The dashboard, split so that one commit rewrites only what changed.

- `status/README.md`: the index. One line per experiment (runs, phases, latest run), the latest runs
  of the lab, the requests not yet run, and what the bot refused (a symlink, a request it cannot
  parse), so a person sees it on the git host.
- `status/<exp>/README.md`: one experiment: its counts, its GPU-hours by month, the newest runs of its
  newest month (at most `PAGE`), the charts of its latest finished runs (`<run-id>.svg`, written by
  the bot), links to the month pages.
- `status/<exp>/<YYYY-MM>.md` (and `<YYYY-MM>-p2.md`, … for a month of more than `PAGE` runs): the
  runs of that experiment started in that month, `PAGE` to a page, oldest part first.

A page is rendered from the status files beside it; a run's month comes from its id, so a new run
touches the index and its experiment page, never the whole history, and no page holds more than
`PAGE` runs however large an experiment or a month grows. A month's part is written once it is full
or its month is over (the experiment page shows the part still filling), and again only when one of
its runs changes, which keeps every page of an experiment's lifetime a single blob version per change.
Every text that comes from a run (a reason, a message, a metric name) is escaped: it shows as
written and cannot break a table or the page.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from tuneplane.constants import CANCELLED, FAILED, PENDING, RAN_TO_END, RUNNING, SUBMITTED, SUCCEEDED
from tuneplane.lab.runs import (
    DASHBOARD,
    RUNS_DIR,
    STATUS_DIR,
    RunKey,
    StatusAttempt,
    UncheckedStatus,
    read_unchecked,
)
from tuneplane.metrics.vocab import Vocabulary
from tuneplane.models.run import RUN_ID
from tuneplane.views.runmetrics import vocabulary_of

ICON = {
    SUBMITTED: "📨",
    PENDING: "⏳",
    RUNNING: "🏃",
    SUCCEEDED: "✅",
    FAILED: "❌",
    CANCELLED: "⛔",
}
SPARK = "▁▂▃▄▅▆▇█"
LATEST = 12  # runs looked at past the newest month for charts to embed
LATEST_LAB = 10  # rows of latest runs on the index
CHARTS = 3  # charts embedded on an experiment page
PAGE = 100  # runs on one page: an experiment page shows its newest; a month of more is split in parts
NOTE = "<!-- Written by `tp bot` from the status files beside it; edits here are overwritten. -->"
WAITING = "## Waiting for the bot"  # the index's notices: requests not yet run, and what the bot refused
REFUSED = "## Refused by the bot"
HEADER = "| run | method | profile | phase | started | duration | GPU-h | metric | files |"
RULE = "|:--|:--|:--|:--|:--|--:|--:|:--|:--|"


def month_of(run_id: str) -> str:
    return f"{run_id[:4]}-{run_id[4:6]}"


def experiment_page_rel(exp: str) -> str:
    return f"{STATUS_DIR}/{exp}/README.md"


def month_page_rel(exp: str, month: str, part: int = 1) -> str:
    """A month's page (`2025-01.md`), or one of its later parts (`2025-01-p2.md`)."""
    return f"{STATUS_DIR}/{exp}/{_page_name(month, part)}"


def _page_name(month: str, part: int) -> str:
    return f"{month}.md" if part == 1 else f"{month}-p{part}.md"


def by_month(ids: list[str]) -> dict[str, list[str]]:
    """Run ids (oldest first) by month, months oldest first."""
    out: dict[str, list[str]] = {}
    for run_id in ids:
        out.setdefault(month_of(run_id), []).append(run_id)
    return out


def parts(month_ids: list[str]) -> list[list[str]]:
    """A month's runs (oldest first) as the parts of its pages: `PAGE` runs each, the last one filling."""
    return [month_ids[at : at + PAGE] for at in range(0, len(month_ids), PAGE)]


def month_pages(root: Path, exp: str) -> list[str]:
    """The month pages in `status/<exp>/` now (paths relative to the lab)."""
    try:
        names = [e.name for e in os.scandir(Path(root) / STATUS_DIR / exp) if e.is_file(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(f"{STATUS_DIR}/{exp}/{n}" for n in names if _MONTH_PAGE.match(n))


_MONTH_PAGE = re.compile(r"[0-9]{4}-[0-9]{2}(?:-p[0-9]+)?\.md\Z")


def chart_rel(key: RunKey) -> str:
    return f"{STATUS_DIR}/{key.experiment}/{key.run_id}.svg"


# ── reading the files beside the pages ──────────────────────────────────────────────────────────


def run_ids(root: Path, exp: str) -> list[str]:
    """Run ids with a status file in `status/<exp>/`, oldest first (names only: no file is read). Only a
    file named `<run id>.json` is a status: a folder of a person's notes holding other JSON is no
    experiment's."""
    try:
        names = [e.name for e in os.scandir(Path(root) / STATUS_DIR / exp) if e.is_file(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n[: -len(".json")] for n in names if n.endswith(".json") and RUN_ID.match(n[: -len(".json")]))


def phase_counts(root: Path, exp: str) -> Counter[str]:
    return Counter(counted_phase(read_unchecked(root, RunKey(exp, r))) for r in run_ids(root, exp))


def counted_phase(status: UncheckedStatus | None) -> str:
    """The phase a status is counted under on the pages ("?" for none, "unreadable" for no status)."""
    return (status.phase or "?") if status else "unreadable"


def gpu_seconds(status: UncheckedStatus | None) -> float:
    """A run's GPU-seconds: the sum over its attempts (each its GPUs times its wall time)."""
    return sum(a.gpu_seconds for a in status.attempts) if status else 0.0


def attempt_month(attempt: StatusAttempt, run_id: str) -> str:
    """The month (`YYYY-MM`, UTC) an attempt's GPU-hours count in: when it started, else the run's month."""
    month = attempt.started_at[:7]
    return month if _MONTH.match(month) else month_of(run_id)


_MONTH = re.compile(r"[0-9]{4}-[0-9]{2}\Z")


def gpu_seconds_by_month(root: Path, exp: str) -> dict[str, float]:
    """An experiment's GPU-seconds by the month each attempt started in (every status is read, as a
    recount does: the experiment page shows them, and no other page has to change with them). The
    monthly budgets of `tuneplane.yaml` count the same numbers."""
    out: dict[str, float] = {}
    for run_id in run_ids(root, exp):
        status = read_unchecked(root, RunKey(exp, run_id))
        for attempt in status.attempts if status else ():
            if attempt.gpu_seconds:
                month = attempt_month(attempt, run_id)
                out[month] = out.get(month, 0.0) + attempt.gpu_seconds
    return out


def gpu_hours(seconds: float) -> str:
    """GPU-seconds as GPU-hours for a page: one decimal, `<0.1` for less, empty for none."""
    if seconds <= 0:
        return ""
    hours = seconds / 3600
    return "<0.1" if hours < 0.05 else f"{hours:,.1f}"


# ── pages ────────────────────────────────────────────────────────────────────────────────────────


def experiment_page(root: Path, exp: str, counts: Mapping[str, int]) -> str:
    """The experiment's page: its counts, the newest runs of its newest month (newest first, at most
    `PAGE`), the charts of its latest finished runs and links to the month pages."""
    ids = run_ids(root, exp)
    months = by_month(ids)
    newest = month_of(ids[-1]) if ids else ""
    shown = list(reversed(months.get(newest, [])))[:PAGE]
    rows = [(RunKey(exp, r), read_unchecked(root, RunKey(exp, r))) for r in shown]
    lines = [f"# {_cell(exp)}", "", NOTE, "", _counts_line(counts), ""]
    spent = gpu_seconds_by_month(root, exp)
    if spent:
        lines += [
            f"**{gpu_hours(sum(spent.values()))} GPU-hours** · "
            + " · ".join(f"{m}: {gpu_hours(spent[m])}" for m in sorted(spent, reverse=True)),
            "",
        ]
    lines += ["[← all experiments](../README.md)", ""]
    if rows:
        lines += [f"## Runs of {newest}", ""]
        full = [n for n, part in enumerate(parts(months[newest]), 1) if len(part) == PAGE]
        if full:
            lines += [
                f"The newest {len(rows)} of {len(months[newest])}; the month's runs, {PAGE} to a page: "
                + " · ".join(_part_link(newest, n) for n in full),
                "",
            ]
        lines += [HEADER, RULE]
        lines += [
            row(key, data, here=exp, request=_requested(root, key), chart=_charted_file(root, key))
            for key, data in rows
        ]
        lines.append("")
    charted = _charted(root, exp, ids, dict((key.run_id, data) for key, data in rows))
    if charted:
        lines += ["## Charts", ""]
        lines += [f"### `{k.run_id}`\n\n![metrics of {k.run_id}]({k.run_id}.svg)\n" for k in charted]
    earlier = sorted(set(months) - {newest}, reverse=True)
    if earlier:
        lines += ["## Earlier months", "", " · ".join(_month_links(m, len(parts(months[m]))) for m in earlier), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _part_link(month: str, part: int) -> str:
    return f"[part {part}]({_page_name(month, part)})"


def _month_links(month: str, count: int) -> str:
    if count == 1:
        return f"[{month}]({_page_name(month, 1)})"
    return (
        f"[{month}]({_page_name(month, 1)}) ("
        + ", ".join(f"[{n}]({_page_name(month, n)})" for n in range(1, count + 1))
        + ")"
    )


def _charted(root: Path, exp: str, ids: list[str], known: Mapping[str, UncheckedStatus | None]) -> list[RunKey]:
    """The latest finished runs with a chart, newest first (at most `CHARTS`, looking at most
    `LATEST` runs back past the newest month: the page stays cheap in a lab of any size)."""
    out: list[RunKey] = []
    for number, run_id in enumerate(reversed(ids)):
        if len(out) >= CHARTS or (run_id not in known and number >= len(known) + LATEST):
            break
        key = RunKey(exp, run_id)
        if not (Path(root) / chart_rel(key)).is_file():
            continue
        status = known[run_id] if run_id in known else read_unchecked(root, key)
        if status and status.phase in RAN_TO_END:
            out.append(key)
    return out


def month_page(root: Path, exp: str, month: str, part: int = 1) -> str:
    """One part of a month's runs (`PAGE` of them, newest first). It names no other part: a part's
    page stays as written until one of its runs changes (the experiment page links every part)."""
    split = parts(by_month(run_ids(root, exp)).get(month, []))
    ids = list(reversed(split[part - 1])) if 0 < part <= len(split) else []
    title = f"# {_cell(exp)}: runs of {month}" + (f", part {part}" if part > 1 else "")
    lines = [title, "", NOTE, "", f"[← {_cell(exp)}](README.md)", "", HEADER, RULE]
    keys = [RunKey(exp, r) for r in ids]
    lines += [
        row(k, read_unchecked(root, k), here=exp, request=_requested(root, k), chart=_charted_file(root, k))
        for k in keys
    ]
    return "\n".join(lines) + "\n"


def index_page(
    root: Path,
    counts: Mapping[str, Mapping[str, int]],
    waiting: Iterable[tuple[RunKey, str]] = (),
    problems: Iterable[str] = (),
    sweeps: Mapping[str, str] | None = None,
) -> str:
    """The lab's index; `sweeps` maps each sweep with a page to that page (relative to `status/`)."""
    total: Counter[str] = Counter()
    for c in counts.values():
        total.update(c)
    runs = sum(total.values())
    lines = [
        "# Runs",
        "",
        NOTE,
        "",
        f"**{runs} run{'s' if runs != 1 else ''}**" + (f" · {_phases(total)}" if total else ""),
        "",
    ]
    waiting = sorted(waiting)
    if waiting:
        lines += [WAITING, "", "| run | experiment | state |", "|:--|:--|:--|"]
        lines += [
            f"| `{k.run_id}` | {_cell(k.experiment)} | {_cell(why)} — [request](../{k.request_rel}) |"
            for k, why in waiting
        ]
        lines.append("")
    problems = list(problems)
    if problems:
        lines += [REFUSED, ""] + [f"- ⚠️ {_cell(p)}" for p in problems] + [""]
    if counts:
        lines += ["## Experiments", "", "| experiment | runs | phases | latest run |", "|:--|--:|:--|:--|"]
        latest_lab: list[tuple[str, str]] = []
        for exp in sorted(counts):
            ids = run_ids(root, exp)
            latest_lab += [(r, exp) for r in ids[-LATEST_LAB:]]
            last = ids[-1] if ids else ""
            status = read_unchecked(root, RunKey(exp, last)) if last else None
            shown = f"`{last}` {_cell(_phase_text(status))}" if last else ""
            lines.append(
                f"| [{_cell(exp)}]({exp}/README.md) | {sum(counts[exp].values())} | "
                f"{_cell(_phases(counts[exp]))} | {shown} |"
            )
        lines.append("")
        recent = sorted(latest_lab, reverse=True)[:LATEST_LAB]
        if recent:
            lines += ["## Latest runs", "", "| run | experiment | phase | duration | metric |", "|:--|:--|:--|--:|:--|"]
            for run_id, exp in recent:
                found = read_unchecked(root, RunKey(exp, run_id))
                status = found or UncheckedStatus()
                lines.append(
                    f"| [`{run_id}`]({exp}/README.md) | {_cell(exp)} | {_cell(_phase_text(found, why=True))} | "
                    f"{duration_text(status.started_at, status.finished_at)} | "
                    f"{_cell(metric_cell(status))} |"
                )
            lines.append("")
    if sweeps:
        lines += ["## Sweeps", "", " · ".join(f"[{_cell(n)}]({link})" for n, link in sorted(sweeps.items())), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def shows_notices(root: Path) -> bool:
    """Whether the index page in the work tree lists requests waiting or refusals (read, not parsed)."""
    path = Path(root) / DASHBOARD
    try:
        if path.is_symlink():
            return False
        with path.open(encoding="utf-8", errors="replace") as text:
            lines = {line.rstrip("\n") for line in text}
    except OSError:
        return False
    return WAITING in lines or REFUSED in lines


def _requested(root: Path, key: RunKey) -> bool:
    """Whether the run's request is still there (a deleted request's row links to its status only)."""
    path = Path(root) / key.request_rel
    return path.is_file() and not path.is_symlink()


def _charted_file(root: Path, key: RunKey) -> bool:
    path = Path(root) / chart_rel(key)
    return path.is_file() and not path.is_symlink()


def row(key: RunKey, status: UncheckedStatus | None, here: str = "", request: bool = True, chart: bool = False) -> str:
    """One run as a table row (links relative to `status/<here>/`, or to `status/` when empty): its
    request while it exists, its status, and its chart when it has one."""
    up = "../../" if here else "../"
    status_link = f"{key.run_id}.json" if here else key.status_rel.removeprefix(STATUS_DIR + "/")
    links = (f"[request]({up}{key.request_rel}) · " if request else "") + f"[status]({status_link})"
    if chart:
        links += f" · [chart]({status_link.removesuffix('.json')}.svg)"
    if status is None:
        return f"| `{key.run_id}` | | | ⚠️ unreadable | | | | | {links} |"
    cells = [
        status.method,
        status.profile,
        _phase_text(status, why=True),
        short_time(status.started_at),
        duration_text(status.started_at, status.finished_at),
        gpu_hours(gpu_seconds(status)),
        metric_cell(status, spark=False),  # the index's latest runs carry the sparkline
    ]
    return f"| `{key.run_id}` | " + " | ".join(_cell(c) for c in cells) + f" | {links} |"


def _phase_text(status: UncheckedStatus | None, why: bool = False) -> str:
    if not status:
        return "⚠️ unreadable"
    phase, reason = status.phase, status.reason
    shown = reason and phase != SUCCEEDED and reason != phase
    text = f"{ICON.get(phase, '')} {phase}".strip() + (f" ({reason})" if shown else "")
    if len(status.attempts) > 1:
        text += f", attempt {len(status.attempts)}"
    if why and phase == FAILED:
        said = failure_line(status.message)
        if said:
            text += ": " + said
    return text


def failure_line(message: str, width: int = 160) -> str:
    """A failed run's reason on one line: the message's first line, and when that only introduces what
    follows ("exited with code 1; last lines:"), the last line too, which is what the job said last."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    if not lines:
        return ""
    first = lines[0]
    if first.endswith(":") and len(lines) == 1:  # it introduces lines the job never wrote
        first = first.rsplit(";", 1)[0] if ";" in first else first.rstrip(":")
    if first.endswith(":") and len(lines) > 1:
        last = lines[-1] if len(lines[-1]) <= width // 2 else lines[-1][: width // 2 - 1] + "…"
        room = width - len(last) - 2
        first = first if len(first) <= room else first[: room - 1] + "…"
        return f"{first} {last}"
    return first if len(first) <= width else first[: width - 1] + "…"


def _counts_line(counts: Mapping[str, int]) -> str:
    n = sum(counts.values())
    return f"**{n} run{'s' if n != 1 else ''}**" + (f" · {_phases(counts)}" if n else "")


def _phases(counts: Mapping[str, int]) -> str:
    return " · ".join(f"{n} {phase.lower()}" for phase, n in sorted(counts.items()) if n)


# Characters Markdown (GitHub's, CommonMark) gives a meaning inline: each is shown as itself with a
# backslash. `<` would open HTML (`<!--` hides the rest of the page), `|` split a table row, `*`, `_`,
# `~` and backticks change the type, `[`/`]`/`!` make a link or an image, `&` an entity, `$` math.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|!~&$])")


def _cell(text: str) -> str:
    """Any text for one table cell, shown as written: Markdown and HTML escaped, every line break
    (CommonMark ends a line at `\\r` too) a space, so a message can never split its row or the page."""
    return _MARKDOWN.sub(r"\\\1", " ".join(str(text).splitlines()))


def short_time(value: object) -> str:
    return str(value)[:16].replace("T", " ") if value else ""


def duration_text(start: object, end: object) -> str:
    """`12.3s` under a minute (`0.04s` under a tenth), `4m 05s` under an hour, `2h 07m` beyond.

    Times recorded to the second only (a backend that reports no fraction) give whole seconds under a
    minute (`12s`, and `<1s` for a run that started and ended within one second): a decimal there
    would claim a precision the times do not have."""
    try:
        seconds = max((_parse(end) - _parse(start)).total_seconds(), 0.0)
    except (TypeError, ValueError):
        return ""
    if seconds < 59.5 and not (_fraction(start) or _fraction(end)):
        return f"{seconds:.0f}s" if seconds >= 1 else "<1s"
    if seconds < 0.095:
        return f"{seconds:.2f}s"
    if seconds < 59.95:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def _fraction(value: object) -> bool:
    """Whether an ISO-8601 time carries a fraction of a second (`…:07.25Z`)."""
    return "." in str(value).rpartition(":")[2]


def _parse(value: object) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def metric_cell(status: UncheckedStatus, vocab: Vocabulary | None = None, spark: bool = True) -> str:
    """The first metric in reading order (primary first), its last value and a sparkline."""
    if not status.metrics:
        return ""
    key = (vocab or _vocabulary(status.method)).order(status.metrics)[0]
    text = f"{key} {status.metrics[key]:.4g}"
    return f"{text} {sparkline(status.series(key))}".rstrip() if spark else text


@functools.lru_cache(maxsize=64)
def _vocabulary(method: str) -> Vocabulary:
    return vocabulary_of(method)


def sparkline(values: Sequence[object]) -> str:
    nums = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    nums = [v for v in nums if math.isfinite(v)][-20:]
    if len(nums) < 2:
        return ""
    low, high = min(nums), max(nums)
    half = high / 2 - low / 2 or 1.0  # by halves: a span of -1e308 to 1e308 stays a number
    return "".join(SPARK[min(len(SPARK) - 1, int((v / 2 - low / 2) / half * (len(SPARK) - 1) + 0.5))] for v in nums)


__all__ = ["DASHBOARD", "RUNS_DIR", "experiment_page", "index_page", "month_page", "row"]
