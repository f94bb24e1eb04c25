"""Kubernetes resource quantities, scaled by the share of a node a run takes. Pure.

A run that asks for part of a node (`h200:4` on an 8-GPU node) gets the same share of the node's CPU and
memory, so two such runs fit on one node instead of each one asking for all of it.
"""

from __future__ import annotations

from fractions import Fraction

from tuneplane.check.kube import parse_quantity

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def parse(text: str) -> Fraction:
    """As the API server reads it: the one parser `tp validate` checks profiles with."""
    return parse_quantity(text.strip())


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
