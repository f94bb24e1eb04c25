"""Helpers shared by this experiment's train.py and export.py: config, overrides, data, callbacks.

They are TunePlane's (tuneplane.lifecycle.trl_support, on the job's path with platform
observability). To change one for this experiment, define your own version here instead of
importing it.
"""

from tuneplane.lifecycle.trl_support import (
    PLATFORM_KEYS,
    SCRIPT_KEYS,
    apply_overrides,
    latest_checkpoint,
    load_config,
    load_split,
    output_dir,
    platform_callbacks,
    read_overrides,
)

__all__ = ["PLATFORM_KEYS", "SCRIPT_KEYS", "apply_overrides", "latest_checkpoint", "load_config", "load_split",
           "output_dir", "platform_callbacks", "read_overrides"]
