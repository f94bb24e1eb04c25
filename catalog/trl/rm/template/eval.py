#!/usr/bin/env python3
"""Score the model on held-out data and write $TUNEPLANE_OUT_DIR/eval/report.json (`tp eval`).

    eval.py --data <file|folder|hub name> --report <report.json> [--model DIR] [--output-dir DIR]

This uses TunePlane's generic evaluation (tuneplane.lifecycle.hf_eval), which scores a reward
model on held-out preference pairs (`chosen`, `rejected`, optionally `prompt`, as in training):
`accuracy` is the share of pairs whose chosen reply scores higher, `margin` the mean difference.
Replace this file with your own evaluation when that does not fit: `tp eval` runs it with the
arguments above.
"""

import sys

from tuneplane.lifecycle.hf_eval import main

if __name__ == "__main__":
    sys.exit(main())
