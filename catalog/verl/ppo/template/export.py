#!/usr/bin/env python3
"""Merge the run's newest verl checkpoint into a Hugging Face folder at <output-dir>/hf_export.

    export.py [--output-dir DIR] [--checkpoint DIR] [--backend fsdp|megatron]

This runs TunePlane's tuneplane.lifecycle.verl_export: verl's own model merger on the newest
global_step_<n>, renamed into place when it succeeded.
Replace this file with your own export when that does not fit; `tp export` runs it with the
arguments above.
"""

import sys

from tuneplane.lifecycle.verl_export import main

if __name__ == "__main__":
    sys.exit(main())
