#!/usr/bin/env python3
"""Write the run's model as a Hugging Face folder at <output-dir>/hf_export (`tp export`).

    export.py --checkpoint DIR [--output-dir DIR]

This runs TunePlane's tuneplane.lifecycle.openrlhf_export: the Hugging Face model OpenRLHF
saved is copied, a LoRA adapter merged by OpenRLHF's own `openrlhf.cli.lora_combiner`.
Replace this file with your own export when that does not fit; `tp export` runs it with the
arguments above.
"""

import sys

from tuneplane.lifecycle.openrlhf_export import main

if __name__ == "__main__":
    sys.exit(main())
