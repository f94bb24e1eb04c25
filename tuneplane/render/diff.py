"""The pull-request comment of `tp render --changed --diff`: rendered changes as Markdown, within a size cap."""

from __future__ import annotations

import difflib
import re

from tuneplane.runtime.records import FrozenRecord

COMMENT_LIMIT = 65_536


class RenderedChange(FrozenRecord):
    """One changed run request: its rendering at the base ref and now (None: absent), or why not."""

    path: str
    before: str | None
    after: str | None
    error: str = ""
    outcome: str = ""  # set for a request the bot submits nothing for: what it does instead, in one line


PLAN_MARKER = "<!-- tuneplane:plan -->"  # the workflow finds its own comment by this line, to update it in place


def diff_comment(changes: list[RenderedChange], base: str, limit: int = COMMENT_LIMIT, plan: str = "") -> str:
    """A Markdown comment with one collapsible unified diff per run request the bot would submit, and
    one line for each changed request it submits nothing for, at most `limit` characters.
    `plan`: Markdown shown above the diffs (the GPU-hours of the new requests, made by `runs.budget`)."""
    submitted = [c for c in changes if not c.outcome]
    others = [c for c in changes if c.outcome]
    head = (
        f"{PLAN_MARKER}\n### tp render: {len(changes)} changed run request(s) against `{base}`, "
        f"{len(submitted)} to submit\n\n{plan}{_outcomes(others)}"
    )
    if not changes:
        return head + "No run request changed: nothing would be submitted.\n"
    if not submitted:
        return head + "Nothing would be submitted.\n"
    return _fit(head, [_section(c) for c in submitted], limit)


def _outcomes(changes: list[RenderedChange]) -> str:
    """One line per changed request the bot submits nothing for (a run it already has, a cancel)."""
    lines = [f"- `{c.path}`: {_html(c.outcome)}" for c in changes]
    return "\n".join(lines) + "\n\n" if lines else ""


class _Section(FrozenRecord):
    summary: str
    lang: str
    lines: list[str]
    open: bool = False

    def text(self, lines: list[str] | None = None, cut: bool = False) -> str:
        body = self.lines if lines is None else lines
        fence = _fence(body)
        tail = ["… (cut here: the rest of this diff is not shown)"] if cut else []
        opening = "<details open>" if self.open else "<details>"
        head = [f"{opening}<summary>{self.summary}</summary>", "", f"{fence}{self.lang}"]
        return "\n".join([*head, *body, *tail, fence, "</details>", ""])


def _section(change: RenderedChange) -> _Section:
    path = f"<code>{_html(change.path)}</code>"
    if change.error:
        return _Section(f"{path}: refused", "text", change.error.splitlines(), open=True)
    before, after = change.before or "", change.after or ""
    lines = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), f"a/{change.path}", f"b/{change.path}", lineterm="", n=3
        )
    )
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    state = "new" if change.before is None else "removed" if change.after is None else "changed"
    if not lines:
        return _Section(f"{path}: rendered manifests unchanged", "text", ["(identical)"])
    return _Section(f"{path}: {state} (+{added} −{removed})", "diff", lines)


def _fit(head: str, sections: list[_Section], limit: int) -> str:
    """Whole sections while they fit; then as much of the next as fits, and a plain note on the rest."""
    out, used = [head], len(head)
    for index, section in enumerate(sections):
        text = section.text()
        note = _truncation_note(len(sections) - index)
        if used + len(text) + (len(note) if index < len(sections) - 1 else 0) <= limit:
            out.append(text)
            used += len(text)
            continue
        partial = _partial(section, limit - used - len(note))
        return "".join(out + ([partial] if partial else []) + [note])
    return "".join(out)


def _partial(section: _Section, room: int) -> str:
    """The longest prefix of the section's lines that fits in `room`, or "" when not one line fits."""
    # The fence of all lines is at least as long as the fence of any prefix, so this bound is safe.
    size = len(section.text([], cut=True)) + 2 * (len(_fence(section.lines)) - 3)
    kept: list[str] = []
    for line in section.lines:
        size += len(line) + 1
        if size > room:
            break
        kept.append(line)
    return section.text(kept, cut=True) if kept else ""


def _truncation_note(left: int) -> str:
    return (
        f"\n**Truncated:** this comment stops at the {COMMENT_LIMIT:,}-character limit of a pull-request "
        f"comment; {left} run request(s) are not shown in full. Run `tp render --changed --diff` "
        "locally for the whole diff.\n"
    )


def _fence(lines: list[str]) -> str:
    longest = max((len(m) for line in lines for m in re.findall(r"`+", line)), default=0)
    return "`" * max(3, longest + 1)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
