"""One metric vocabulary: the canonical name of every reported key, and the order people read them in.

Canonical names live in four namespaces: `train/…`, `validation/…`, `eval/…` and `hw/…`. A run's
raw keys are mapped to them by the recipe's `metrics.aliases` first, then by the convention that
transformers' own reporting integrations follow (`eval_x` is `validation/x`, `train_x` and a bare
`x` are `train/x`). Keys those integrations already rewrote are read the same way: `train/loss` and
`eval/loss` are `loss` and `eval_loss` to the aliases, and evaluation during training (`eval/…`)
is `validation/…`; `eval/…` names what an evaluation job reports, through an alias or `test_x`.
Other frameworks' validation spellings are validation too: NeMo-RL's `validation/val_loss`,
Keras-style `val_loss`, verl's `val/loss` and its RL trainer's `val-core/<data source>/<var>/<metric>`
and `val-aux/…` (which never share a name, so both are `validation/<data source>/…`). An evaluation
key with no alias of its own takes its training name's alias in its namespace: with
`rewards/margins` → `train/reward_margin`, TRL's `eval_rewards/margins` is
`validation/reward_margin`. NeMo-RL's own GPU monitor (`ray/node.0.gpu.0.util`) is hardware
(`hw/node.0.gpu.0.util`). Scalars named after their split, as torch's TensorBoard documentation
writes them, are read the same way: `Loss/train` is `train/loss`, `Loss/test` and `Accuracy/val`
are `validation/…`. A key in another namespace (`hw/gpu_util`, a framework's `actor/kl`)
keeps its name. A namespace is found in any case; one spelled in capitals is a title, read in lower
case (`Train/Loss`, `EVAL_LOSS`). A name is read again until it names itself, so chained aliases are
followed and a canonical name read again is itself (`eval/…` names excepted: read again, they are
transformers' spelling of validation). The raw key is never lost: `raw_keys` maps a canonical
name back to the stored keys, and a raw key given as a query is answered as itself.

Order: the recipe's `primary` metrics in the recipe's order, then the rest (training, validation,
evaluation, others; losses before accuracies before the rest), hardware last.

Pure and standard library only: the ingest read path, the status writer, the dashboard and the
charts all use this one module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from tuneplane.runtime.records import FrozenRecord, field

NAMESPACES = ("train/", "validation/", "eval/", "hw/")
HARDWARE = "hw/"
EVALUATION = "eval/"
MAX_HOPS = 16  # aliases followed from one key; a longer chain is cut there
# What a recipe that names no primary metrics (custom) shows first.
DEFAULT_PRIMARY = ("train/loss", "validation/loss")
# Keys every trainer in the HF family reports under these names, whatever the recipe says.
CONVENTION = {
    "learning_rate": "train/lr",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
}
_GROUP = {"train/": 0, "validation/": 1, "eval/": 2}
_WORDS = ("loss", "acc", "reward", "score", "f1", "perplexity")

V = TypeVar("V")


class Vocabulary(FrozenRecord):
    """The canonical names and the reading order of one recipe's metrics."""

    aliases: Mapping[str, str] = field(default_factory=dict)
    primary: tuple[str, ...] = ()

    @classmethod
    def of(cls, aliases: Mapping[str, str] | None = None, primary: Iterable[str] = ()) -> Vocabulary:
        return cls(dict(aliases or {}), tuple(primary))

    # ── names ────────────────────────────────────────────────────────────────────────────────

    def canonical(self, raw: str) -> str:
        """The canonical name of a raw key. A name is read again until it names itself, so an alias
        whose target is another alias's key is followed (`approx_entropy` → `train/approx_entropy`
        → `train/entropy`) and a canonical name read again (a status's keys, a query) names itself;
        a cycle of aliases stops where it closes. An `eval/…` name is final: read again it would be
        transformers' spelling of validation."""
        path = [raw]
        for _ in range(MAX_HOPS):
            following = self._convention(path[-1])
            if following == path[-1]:
                break
            if following in path:  # a cycle: each of its names answers with the same one
                return min(path[path.index(following) :])
            path.append(following)
            if following.startswith(EVALUATION):
                break
        return path[-1]

    def _convention(self, raw: str) -> str:
        """One step: the recipe's alias of the key, else the trainers' convention."""
        if raw in self.aliases:
            return self.aliases[raw]
        split = _split(raw)
        if split is not None:
            namespace, rest = split
            if namespace == "train/":
                return self.aliases.get(rest) or CONVENTION.get(rest) or "train/" + rest
            # Evaluation keys: the recipe's alias of the HF spelling (`eval_loss`, `test_loss`), else
            # the training name's alias moved to this namespace (TRL's `eval_rewards/margins` is
            # `validation/reward_margin` beside `rewards/margins` → `train/reward_margin`).
            explicit = self.aliases.get(_RAW_OF[namespace] + rest)
            if explicit:
                return explicit
            trained = self.aliases.get(rest) or self.aliases.get("train/" + rest) or CONVENTION.get(rest) or ""
            if trained.startswith("train/"):
                return namespace + trained[len("train/") :]
            return namespace + rest
        if raw in CONVENTION:
            return CONVENTION[raw]
        for spelled, hardware in _HARDWARE_SPELLINGS:
            if raw.startswith(spelled) and len(raw) > len(spelled):
                return hardware + raw[len(spelled) :]
        if "/" in raw:
            return raw  # already namespaced (ours, or a framework's own `actor/…`)
        return "train/" + raw

    def pick(self, raw_keys: Iterable[str], weight: Mapping[str, float] | None = None) -> dict[str, str]:
        """`{canonical: raw}` in reading order: which stored key answers for each canonical name.

        Two raw keys with one canonical name (a trainer that logs `eval_loss` and
        `validation/eval_loss`): the one already spelled canonically wins, else the heavier one by
        `weight` (e.g. the point count), else the first by name.
        """
        chosen: dict[str, str] = {}
        for raw in sorted(set(raw_keys)):
            name = self.canonical(raw)
            held = chosen.get(name)
            if held is None or _better(raw, held, name, weight):
                chosen[name] = raw
        return {name: chosen[name] for name in self.order(chosen)}

    def rename(self, by_raw: Mapping[str, V], weight: Mapping[str, float] | None = None) -> dict[str, V]:
        """`{raw: value}` as `{canonical: value}`, in reading order (see `pick`)."""
        return {name: by_raw[raw] for name, raw in self.pick(by_raw, weight).items()}

    def raw_keys(self, name: str, stored: Iterable[str]) -> list[str]:
        """The stored keys a query for `name` reads: the key itself when stored, else its sources."""
        keys = list(stored)
        if name in keys:
            return [name]
        return sorted(k for k in keys if self.canonical(k) == name)

    def resolve(self, name: str, stored: Iterable[str], weight: Mapping[str, float] | None = None) -> str | None:
        """The one stored key that answers a query for `name` (raw or canonical), or None."""
        keys = list(stored)
        if name in keys:
            return name
        best: str | None = None
        for raw in sorted(keys):
            if self.canonical(raw) == name and (best is None or _better(raw, best, name, weight)):
                best = raw
        return best

    # ── order ────────────────────────────────────────────────────────────────────────────────

    @property
    def leading(self) -> tuple[str, ...]:
        return self.primary or DEFAULT_PRIMARY

    def sort_key(self, name: str) -> tuple[int, int, int, str]:
        leading = self.leading
        if name in leading:
            return (0, leading.index(name), 0, name)
        if name.startswith(HARDWARE):
            return (3, 0, 0, name)
        group = next((g for prefix, g in _GROUP.items() if name.startswith(prefix)), len(_GROUP))
        word = next((i for i, w in enumerate(_WORDS) if w in name.lower()), len(_WORDS))
        return (1, group, word, name)

    def order(self, names: Iterable[str]) -> list[str]:
        """Primary first (in the recipe's order), then the rest, hardware last."""
        return sorted(set(names), key=self.sort_key)

    def is_primary(self, name: str) -> bool:
        return name in self.leading


# How trainers spell their namespaces, longest first: transformers' `eval_x` / `test_x` and what its
# integrations rewrite them to (`eval/x`, `test/x`, `train/x`), the SDK's `validation/` prefix put
# before those (`validation/eval_x`), NeMo-RL's `validation/val_x`, Keras-style `val_x`, verl's `val/x`
# and its RL trainer's `val-core/x` and `val-aux/x`.
_SPELLINGS = (
    ("validation/eval_", "validation/"),
    ("validation/val_", "validation/"),
    ("val-core/", "validation/"),
    ("val-aux/", "validation/"),
    ("eval/", "validation/"),
    ("eval_", "validation/"),
    ("val/", "validation/"),
    ("val_", "validation/"),
    ("test/", "eval/"),
    ("test_", "eval/"),
    ("train/", "train/"),
    ("train_", "train/"),
    ("validation/", "validation/"),
)
_RAW_OF = {"validation/": "eval_", "eval/": "test_"}
# Hardware a framework samples itself: NeMo-RL's GPU monitor logs `ray/node.<n>.gpu.<i>.util`,
# `…mem_gb` and `ray/node.<n>.mem_gb`, stepped by seconds since it started, not by training step.
_HARDWARE_SPELLINGS = (("ray/node.", "hw/node."),)


# The split named after the metric, as torch.utils.tensorboard's documentation writes scalars
# (`Loss/train`, `Loss/test`, `Accuracy/test`): a test split during training is validation.
_SPLIT_SUFFIXES = {
    "train": "train/",
    "training": "train/",
    "val": "validation/",
    "valid": "validation/",
    "validation": "validation/",
    "eval": "validation/",
    "test": "validation/",
}


def _split(key: str) -> tuple[str, str] | None:
    """(canonical namespace, the rest) of a key spelled in a trainer's namespace, else None. The
    namespace is found in any case; one spelled in capitals (`Train/Loss`, `EVAL_LOSS`, a
    TensorBoard title) is a title, and the metric is read in lower case, as in `Loss/train`."""
    folded = key.lower()
    for prefix, namespace in _SPELLINGS:
        if folded.startswith(prefix) and len(key) > len(prefix):
            rest = key[len(prefix) :]
            return namespace, rest if key.startswith(prefix) else rest.lower()
    metric, slash, split = key.partition("/")
    if slash and metric and "/" not in split and split.lower() in _SPLIT_SUFFIXES:
        return _SPLIT_SUFFIXES[split.lower()], metric.lower()
    return None


def is_hardware(name: str) -> bool:
    return name.startswith(HARDWARE)


def _better(raw: str, held: str, name: str, weight: Mapping[str, float] | None) -> bool:
    if (raw == name) != (held == name):
        return raw == name
    if weight is not None:
        a, b = float(weight.get(raw, 0)), float(weight.get(held, 0))
        if a != b:
            return a > b
    return raw < held


def counts(summary: Mapping[str, Mapping[str, object]]) -> dict[str, float]:
    """Point counts per key of an ingest summary (the weight `rename` prefers)."""
    out: dict[str, float] = {}
    for key, stats in summary.items():
        value = stats.get("count") if isinstance(stats, Mapping) else None
        out[key] = float(value) if isinstance(value, int | float) else 0.0
    return out
