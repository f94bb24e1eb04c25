"""Kubernetes resource quantities, scaled by the share of a node a run takes. Pure.

A run that asks for part of a node (`h200:4` on an 8-GPU node) gets the same share of the node's CPU and
memory, so two such runs fit on one node instead of each one asking for all of it.
"""

from __future__ import annotations

import re
from fractions import Fraction

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTPE]i?|m|k)?$")
_FACTORS: dict[str | None, int | Fraction] = {
    None: 1, "m": Fraction(1, 1000), "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def parse(text: str) -> Fraction:
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)")
    return Fraction(match.group(1)) * _FACTORS[match.group(2)]


def share(gpus: int, node_gpus: int) -> Fraction:
    """The part of a node a run with `gpus` GPUs per node takes; a whole node when it takes them all."""
    if node_gpus <= 0 or gpus <= 0 or gpus >= node_gpus:
        return Fraction(1)
    return Fraction(gpus, node_gpus)


def scale_cpu(text: str, part: Fraction) -> str:
    if part == 1:
        return text
    milli = int(parse(text) * part * 1000)  # rounded down: never more than the share
    return str(milli // 1000) if milli % 1000 == 0 else f"{max(milli, 1)}m"


def scale_memory(text: str, part: Fraction) -> str:
    if part == 1:
        return text
    size = int(parse(text) * part)
    for unit, factor in _BINARY:
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{max(size // 2**20, 1)}Mi"  # rounded down to whole MiB
