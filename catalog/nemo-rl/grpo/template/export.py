#!/usr/bin/env python3
"""Convert the run's newest NeMo-RL checkpoint to a Hugging Face folder at <output-dir>/hf_export (`tp export`).

    export.py [--output-dir DIR] [--checkpoint DIR]

This runs TunePlane's tuneplane.lifecycle.nemo_rl_export: NeMo-RL's own DCP-to-HF converter on the
newest step_<n>, renamed into place when it succeeded.
Replace this file with your own export when that does not fit; `tp export` runs it with the
arguments above.
"""

import sys

from tuneplane.lifecycle.nemo_rl_export import main

if __name__ == "__main__":
    sys.exit(main())
