#!/usr/bin/env bash
# The one file the custom adapter runs, as `bash <absolute path of this file>`.
#
# Where the job starts: the working directory is the job package root ($TUNEPLANE_WORK_DIR), not
# this experiment's folder, so name your own files through $TUNEPLANE_EXP_DIR.
# What to keep: write checkpoints, logs and exports under $TUNEPLANE_OUT_DIR (checkpoints/*, logs,
# hf_export, eval/report.json); everything else is thrown away when the container stops.
# How big the job is: TUNEPLANE_CLUSTER_NUM_NODES x TUNEPLANE_CLUSTER_GPUS_PER_NODE GPUs (0 on a CPU
# machine); start TUNEPLANE_CLUSTER_PROCS_PER_NODE processes per node (never 0), as below.
# Charts: call tuneplane.report (init/log/finish) from the trainer; printed loss lines are logs only.
#
# Replace the last line of this file with one launch, for example:
#
#   exec python "${TUNEPLANE_EXP_DIR}/train.py" \
#     --config "${TUNEPLANE_EXP_DIR}/config.yaml" \
#     --output-dir "${TUNEPLANE_OUT_DIR}"
#
#   exec torchrun --nnodes "${TUNEPLANE_CLUSTER_NUM_NODES}" \
#     --nproc_per_node "${TUNEPLANE_CLUSTER_PROCS_PER_NODE}" \
#     "${TUNEPLANE_EXP_DIR}/train.py" --output-dir "${TUNEPLANE_OUT_DIR}"
#
#   exec accelerate launch --num_processes "${TUNEPLANE_CLUSTER_PROCS_PER_NODE}" \
#     "${TUNEPLANE_EXP_DIR}/train.py" --output_dir "${TUNEPLANE_OUT_DIR}"
#
# `exec` hands over to the trainer: its exit status is the job's, and the job log starts with it.
set -euo pipefail

# The environment contract. Stop at once, naming the variable, when the job was started some
# other way than by the platform (a bare `bash train.sh` on a laptop, for instance).
: "${TUNEPLANE_WORK_DIR:?is not set: run this through tp submit, not by hand}"
: "${TUNEPLANE_EXP_DIR:?is not set: run this through tp submit, not by hand}"
: "${TUNEPLANE_OUT_DIR:?is not set: run this through tp submit, not by hand}"
: "${TUNEPLANE_FRAMEWORK:?is not set: run this through tp submit, not by hand}"
: "${TUNEPLANE_RECIPE:?is not set: run this through tp submit, not by hand}"
: "${TUNEPLANE_CLUSTER_NUM_NODES:?is not set: run this through tp submit, not by hand}"
: "${TUNEPLANE_CLUSTER_GPUS_PER_NODE:?is not set: run this through tp submit, not by hand}"

echo "no training command yet: edit experiments/${TUNEPLANE_EXP_DIR##*/}/train.sh" >&2; exit 1
