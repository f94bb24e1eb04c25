"""The bot's ledger (`status/index.json`): what it has handled, so a no-op run reads almost nothing.

Three small maps, committed with every bot commit:
- `requests`: experiment → the `runs/<exp>` tree id whose requests all have a status. An experiment
  whose tree id is unchanged has no new request, so its requests are not even listed.
- `statuses`: experiment → the `status/<exp>` tree id the bot left. A different id means someone
  else wrote there (`tp submit --local`, a hand edit, another bot): only the changed files are read.
- `counts`: experiment → phase → runs, kept up to date from the files each commit changes, so the
  index page needs no status file of an experiment that did not change.
- `active`: `exp/run-id` → the phase the bot last saw, for every run it has not seen end. Sync and the
  cancel check look at these runs only. A run leaves the ledger when the bot itself sees it end
  (the backend says so, or the bot cancelled it), never because its status file says so: the
  cluster is the truth, and a status hand-edited to `Succeeded` stays watched. A run that ended while
  the metrics receiver could not be reached stays, as `<phase>+metrics`, until sync has read them.

- `index`: the blob id of the index page (`status/README.md`) the bot committed. The page lies
  outside every experiment's tree, so this is how a hand edit or a deletion of it is noticed.
- `sweeps`: the tree id of `sweeps/` the sweep pages (`status/_sweeps/`) were last rendered for. A
  sweep file added, changed or removed changes it, so its page is written or removed though no
  status changed; otherwise a sweep's page is written only with a status of one of its trials.
- `metrics_at`: when the bot last committed new metric points of running runs (UTC, ISO 8601). A sync
  whose only news is metrics commits nothing until `bot.metrics_every` seconds after it.

A missing or damaged ledger is rebuilt from a full scan, so deleting it is always safe. So is one
edited by hand: the ledger carries the digest of its own maps, and one whose digest does not match
(a person "tidied" `active`, a merge tool joined two versions) is not trusted, since a run dropped from
`active` would never be watched again. Two bots that raced merge their ledgers: active runs are
united, tree ids that differ are dropped (rescanned).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tuneplane.runtime.records import Record, field

LEDGER = "status/index.json"
VERSION = 5  # 5: when metrics were last committed; 4: the sweeps' tree id (older: read, pages rendered once)
_READ = (2, 3, 4, VERSION)  # 2: the digest (a version-1 ledger is rebuilt once); 3: the index page's blob id
_MAPS = ("requests", "statuses", "active", "counts")
AWAITING = "+metrics"  # an `active` phase with this suffix: the run ended, its metrics are still to be read


class Ledger(Record):
    requests: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    active: dict[str, str] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # exp → phase → runs (the index page)
    index: str = ""  # blob id of the index page as the bot committed it ("": unknown, rendered again)
    sweeps: str = ""  # tree id of sweeps/ the sweep pages were rendered for ("": none, or unknown)
    metrics_at: str = ""  # when metric points of running runs were last committed ("": never)
    found: bool = False  # read from the commit (False: rebuilt by a full scan)
    problem: str = ""  # why a committed ledger was not trusted ("" when it was, or there was none)

    @classmethod
    def parse(cls, text: str | None) -> Ledger:
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return cls(problem="it is not JSON")
        if not isinstance(data, dict) or data.get("version") not in _READ:
            return cls(problem=f"it is not a version-{VERSION} ledger")
        version = data["version"]
        keys = _MAPS + ("index",) * (version >= 3) + ("sweeps",) * (version >= 4) + ("metrics_at",) * (version >= 5)
        index = data.get("index", "") if version >= 3 else ""
        sweeps = data.get("sweeps", "") if version >= 4 else ""
        metrics_at = data.get("metrics_at", "") if version >= 5 else ""
        maps = [data.get(k) for k in ("requests", "statuses", "active")]
        if not all(isinstance(m, dict) and all(isinstance(v, str) for v in m.values()) for m in maps):
            return cls(problem="its maps are not what the bot writes")
        counts = data.get("counts")
        if not isinstance(counts, dict) or not all(
            isinstance(c, dict) and all(isinstance(n, int) and n >= 0 for n in c.values()) for c in counts.values()
        ):
            return cls(problem="its counts are not what the bot writes")
        if not all(isinstance(v, str) for v in (index, sweeps, metrics_at)):
            return cls(problem="its index is not what the bot writes")
        if data.get("digest") != _digest({k: data.get(k) for k in keys}):
            return cls(problem="it was changed outside the bot (its digest does not match)")
        return cls(
            dict(maps[0]),  # type: ignore[arg-type]
            dict(maps[1]),  # type: ignore[arg-type]
            dict(maps[2]),  # type: ignore[arg-type]
            dict(counts),
            index,
            sweeps,
            metrics_at,
            found=True,
        )

    def dump(self) -> str:
        data: dict[str, Any] = {
            "$comment": "Written by tp bot: what it has handled. Safe to delete (it is rebuilt).",
            "version": VERSION,
            "requests": dict(sorted(self.requests.items())),
            "statuses": dict(sorted(self.statuses.items())),
            "active": dict(sorted(self.active.items())),
            "counts": {exp: dict(sorted(c.items())) for exp, c in sorted(self.counts.items())},
            "index": self.index,
            "sweeps": self.sweeps,
            "metrics_at": self.metrics_at,
        }
        data["digest"] = _digest({k: data[k] for k in (*_MAPS, "index", "sweeps", "metrics_at")})
        return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def merge(upstream: str | None, ours: str | None) -> str:
    """Two bots' ledgers as one: active runs united, tree ids kept only where both agree."""
    a, b = Ledger.parse(upstream), Ledger.parse(ours)
    both = Ledger(
        requests={k: v for k, v in a.requests.items() if b.requests.get(k) == v},
        statuses={k: v for k, v in a.statuses.items() if b.statuses.get(k) == v},
        active={**a.active, **b.active},
        counts={k: v for k, v in a.counts.items() if b.counts.get(k) == v},
        index=a.index if a.index == b.index else "",
        sweeps=a.sweeps if a.sweeps == b.sweeps else "",
        metrics_at=max(a.metrics_at, b.metrics_at),  # the later commit of metrics counts
    )
    return both.dump()


def _digest(maps: dict[str, Any]) -> str:
    """The digest of the ledger's maps, over a canonical form (key order and spacing do not count)."""
    canonical = json.dumps(maps, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
