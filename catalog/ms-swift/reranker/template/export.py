#!/usr/bin/env python3
"""Write the run's model as a Hugging Face folder at <output-dir>/hf_export (`tp export`).

    export.py --checkpoint DIR [--output-dir DIR]

This runs TunePlane's tuneplane.lifecycle.swift_export: a LoRA checkpoint is merged by
ms-swift's own `swift export --adapters <checkpoint> --merge_lora true`, a full-weights one is
copied.
Replace this file with your own export when that does not fit; `tp export` runs it with the
arguments above.
"""

import sys

from tuneplane.lifecycle.swift_export import main

if __name__ == "__main__":
    sys.exit(main())
