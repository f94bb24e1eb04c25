#!/usr/bin/env bash
# TunePlane quickstart: a lab, a custom experiment with a real (tiny) training loop, a local run, and
# its status committed to the lab's git history. Needs only `pip install .` (or `pip install tuneplane`)
# and git; no cluster, no downloads.
#
#   examples/quickstart.sh            # in a new temporary directory
#   examples/quickstart.sh ~/my-lab   # in a directory of your choice (created; must not be a lab yet)
#
# Run outputs go under $TUNEPLANE_STORAGE_ROOT (default here: <dir>/storage).
set -euo pipefail

base="${1:-$(mktemp -d "${TMPDIR:-/tmp}/tuneplane-quickstart.XXXXXX")}"
mkdir -p "$base"
base="$(cd "$base" && pwd)"
lab="$base/lab"
export TUNEPLANE_STORAGE_ROOT="${TUNEPLANE_STORAGE_ROOT:-$base/storage}"
steps=6
n=0
step() { n=$((n + 1)); printf '\n\033[1m[%d/%d] %s\033[0m\n' "$n" "$steps" "$*"; }

if ! command -v tp >/dev/null 2>&1; then
  echo "tp is not on PATH: install TunePlane first (pip install . in the repository)" >&2
  exit 2
fi
if [ -e "$lab/tuneplane.yaml" ]; then
  echo "$lab is already a lab; pass an empty directory" >&2
  exit 2
fi

step "Create a lab in $lab (tp init)"
tp init "$lab" --name quickstart
cd "$lab"

step "Scaffold a custom experiment (tp new logreg --method custom/custom)"
tp new logreg --method custom/custom

cat > experiments/logreg/train.py <<'PY'
"""Logistic regression by stochastic gradient descent on synthetic data (standard library only)."""
import json
import math
import os
import random

from tuneplane import report

EPOCHS, LEARNING_RATE, POINTS = 12, 0.3, 2000
random.seed(7)
true_w = (2.0, -3.0)
data = []
for _ in range(POINTS):
    x = (random.gauss(0, 1), random.gauss(0, 1))
    margin = true_w[0] * x[0] + true_w[1] * x[1] + 0.5
    data.append((x, 1 if margin + random.gauss(0, 0.5) > 0 else 0))
split = int(0.8 * POINTS)
train, valid = data[:split], data[split:]
w, b = [0.0, 0.0], 0.0


def predict(x):
    z = w[0] * x[0] + w[1] * x[1] + b
    return 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))


report.init(hparams={"epochs": EPOCHS, "learning_rate": LEARNING_RATE, "points": POINTS})
for epoch in range(1, EPOCHS + 1):
    random.shuffle(train)
    loss = 0.0
    for x, y in train:
        p = predict(x)
        grad = p - y
        w[0] -= LEARNING_RATE * grad * x[0]
        w[1] -= LEARNING_RATE * grad * x[1]
        b -= LEARNING_RATE * grad
        loss -= math.log(max(p if y else 1 - p, 1e-12))
    accuracy = sum((predict(x) > 0.5) == (y == 1) for x, y in valid) / len(valid)
    report.log({"loss": loss / len(train), "accuracy": accuracy}, step=epoch)
    print(f"epoch {epoch:2d}/{EPOCHS}  loss {loss / len(train):.4f}  validation accuracy {accuracy:.3f}", flush=True)
report.finish()

checkpoints = os.path.join(os.environ["TUNEPLANE_OUT_DIR"], "checkpoints")
os.makedirs(checkpoints, exist_ok=True)
with open(os.path.join(checkpoints, f"step-{EPOCHS}.json"), "w") as fh:
    json.dump({"w": w, "b": b, "epochs": EPOCHS}, fh)
print(f"checkpoint written to {checkpoints}/step-{EPOCHS}.json")
PY

# The scaffold's train.sh ends in a placeholder that fails on purpose: replace it with the launch.
sed -i.bak '$d' experiments/logreg/train.sh && rm experiments/logreg/train.sh.bak
echo 'exec python "${TUNEPLANE_EXP_DIR}/train.py"' >> experiments/logreg/train.sh

step "Commit the experiment (jobs run a commit, never uncommitted files)"
git add -A
git commit -q -m "Add the logreg experiment"
git log --oneline -1

step "Check it (tp validate)"
tp validate logreg || { echo "tp validate found problems (see above)" >&2; exit 1; }

step "Run it on this machine (tp submit --local); the trainer's output follows"
tp submit logreg --profile local --image python:3.12 \
  --observability-url https://tracking.example.org/quickstart \
  --message "quickstart: logistic regression on synthetic data" --local

step "Where everything is"
request="$(ls runs/logreg/*.yaml)"
status="$(ls status/logreg/*.json)"
run_id="$(basename "$status" .json)"
phase="$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["phase"])' "$status")"
out_dir="$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["out_dir"])' "$status")"
cat <<EOF
run          $run_id: $phase
lab          $lab
request      $lab/$request
status       $lab/$status
dashboard    $lab/status/README.md
outputs      $out_dir
checkpoint   $(ls "$out_dir"/checkpoints/*)
log          $(dirname "$out_dir")/run.log

git history of the lab:
$(git log --oneline -4)

dashboard:
$(tail -n 1 status/README.md)
EOF
[ "$phase" = Succeeded ]
