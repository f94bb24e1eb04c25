"""`--profile NAME[:TOTAL_GPUS]` → nodes × GPUs per node (CONTRACT §7)."""

from __future__ import annotations

import pytest

from tuneplane.check.shapes import Shape, ShapeError, parse_profile
from tuneplane.models.lab import LabFile

LAB = LabFile.model_validate(
    {
        "apiVersion": "tuneplane/project/v1",
        "name": "lab",
        "profiles": {
            "local": {"local": True, "gpus_per_node": 0},
            "gpu-box": {"local": True, "gpus_per_node": 2, "max_nodes": 2},
            "h200": {"gpus_per_node": 8, "max_nodes": 4},
            "a100-pair": {"gpus_per_node": 8, "max_nodes": 8, "default_gpus": 16},
            "cpu": {"gpus_per_node": 0, "max_nodes": 1},
        },
    }
)


@pytest.mark.parametrize(
    "text,nodes,gpus_per_node,local",
    [
        ("h200", 1, 8, False),
        ("h200:1", 1, 1, False),
        ("h200:8", 1, 8, False),
        ("h200:16", 2, 8, False),
        ("h200:32", 4, 8, False),
        ("a100-pair", 2, 8, False),
        ("a100-pair:4", 1, 4, False),
        ("local", 1, 0, True),
        ("local:0", 1, 0, True),
        ("gpu-box:2", 1, 2, True),
        ("cpu", 1, 0, False),
    ],
)
def test_shapes(text: str, nodes: int, gpus_per_node: int, local: bool) -> None:
    shape = parse_profile(text, LAB)
    assert shape == Shape(text.split(":")[0], nodes, gpus_per_node, local)


@pytest.mark.parametrize(
    "text,says,hint",
    [
        ("h200:12", "12 GPUs do not fill whole h200 nodes of 8", "8 or 16"),
        ("h200:9", "9 GPUs do not fill whole", "8 or 16"),
        ("h200:40", "needs 5 nodes", "at most 32"),
        ("h200:64", "needs 8 nodes", "at most 32"),
        ("h20:8", "unknown profile 'h20'", "did you mean 'h200'"),
        ("zzz", "unknown profile 'zzz'", "a100-pair, cpu, gpu-box, h200, local"),
        ("h200:eight", "must be a whole number", "h200:8"),
        ("h200:-8", "must be a whole number", ""),
        ("h200:", "must be a whole number", ""),
        ("h200:0", "no GPUs", "h200:1"),
        ("cpu:8", "has no GPUs", "--profile cpu"),
        ("gpu-box:4", "runs on one machine", "at most 2"),
    ],
)
def test_refusals_say_why_and_what_would_fit(text: str, says: str, hint: str) -> None:
    with pytest.raises(ShapeError) as info:
        parse_profile(text, LAB)
    assert says in str(info.value)
    assert hint in info.value.hint


def test_a_lab_without_profiles_names_none() -> None:
    lab = LabFile.model_validate({"apiVersion": "tuneplane/project/v1", "name": "lab", "profiles": {}})
    with pytest.raises(ShapeError) as info:
        parse_profile("h200", lab)
    assert "(none)" in info.value.hint
