"""StarForge, the predecessor: the names its labs and jobs used, and what TunePlane calls them now.

`tp migrate` rewrites them and `tp validate` warns about those left (CONTRACT §1).
"""

from __future__ import annotations

import re

ENV_RENAMES = {
    "FORGE_WORK_DIR": "TUNEPLANE_WORK_DIR", "FORGE_EXP_DIR": "TUNEPLANE_EXP_DIR",
    "FORGE_OUT_DIR": "TUNEPLANE_OUT_DIR", "FORGE_FRAMEWORK": "TUNEPLANE_FRAMEWORK",
    "FORGE_RECIPE": "TUNEPLANE_RECIPE", "FORGE_CLUSTER_NUM_NODES": "TUNEPLANE_CLUSTER_NUM_NODES",
    "FORGE_CLUSTER_GPUS_PER_NODE": "TUNEPLANE_CLUSTER_GPUS_PER_NODE",
    "STARFORGE_ENDPOINT": "TUNEPLANE_JOB_ENDPOINT", "STARFORGE_RUN_ID": "TUNEPLANE_JOB_RUN_ID",
    "STARFORGE_TOKEN": "TUNEPLANE_JOB_TOKEN", "STARFORGE_ENABLED": "TUNEPLANE_JOB_ENABLED",
}
# A StarForge name in code or a script: its environment variables and its SDK module.
LEGACY_NAME = re.compile(r"\b(FORGE_[A-Z_]+|STARFORGE_[A-Z_]+|starforge\.report)\b")
