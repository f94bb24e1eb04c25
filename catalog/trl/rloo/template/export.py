#!/usr/bin/env python3
"""Write the run's model as a Hugging Face folder at <output-dir>/hf_export (`tp export`).

    export.py [--output-dir DIR] [--checkpoint DIR]

This runs TunePlane's tuneplane.lifecycle.trl_export: newest checkpoint, LoRA merged into its
base, safetensors written atomically.
Replace this file with your own export when that does not fit; `tp export` runs it with the
arguments above.
"""

import sys

from tuneplane.lifecycle.trl_export import main

if __name__ == "__main__":
    sys.exit(main())
