#!/usr/bin/env python3
"""Score the model on held-out data and write $TUNEPLANE_OUT_DIR/eval/report.json (`tp eval`).

    eval.py --data <file|folder|hub name> --report <report.json> [--model DIR] [--output-dir DIR]

This uses TunePlane's generic evaluation (tuneplane.lifecycle.hf_eval: loss, perplexity, exact
match and answer accuracy; its docstring lists the row formats it reads). Replace this file with
your own evaluation when that does not fit: `tp eval` runs it with the arguments above.
"""

import sys

from tuneplane.lifecycle.hf_eval import main

if __name__ == "__main__":
    sys.exit(main())
