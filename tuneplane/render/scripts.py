"""The constant shell and Python text rendered pods run: the checkout init script and the SDK bootstrap."""

from __future__ import annotations

# Runs the launcher from the SDK directory when the image has no tuneplane; with platform
# observability the directory is also prepended to PYTHONPATH for the trainer (CONTRACT §7).
BOOTSTRAP = (
    "import os, sys\n"
    "sdk, mode = sys.argv[1], sys.argv[2]\n"
    "del sys.argv[1:]\n"
    'if mode == "prepend":\n'
    '    old = os.environ.get("PYTHONPATH")\n'
    '    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (sdk, old) if p)\n'
    "sys.path.insert(0, sdk)\n"
    "from tuneplane.launcher import main\n"
    "sys.exit(main([]))\n"
)


# The init container's script: constant text, every value arrives as an environment variable.
# One pod of a run clones, the others wait for its result. The lock is a lease on the shared volume: a
# directory (mkdir is atomic) with an owner file whose mtime the holder renews; it is released on every
# exit the shell sees, and a holder killed outright (no trap runs) is taken over once its heartbeat is
# older than the lease. Its renewer holds no output open, so whoever reads the script's output sees its
# end when the script ends. umask 002 and the pod's fsGroup let a trainer of another uid write the out dir.
CHECKOUT_SCRIPT = r"""set -eu
set -f
umask 002
mkdir -p "$TUNEPLANE_RUN_DIR" "$TUNEPLANE_OUT_DIR"
ready="$TUNEPLANE_WORK_DIR/.tuneplane/jobspec.json"
lock="$TUNEPLANE_RUN_DIR/.checkout.lock"
lease="${TUNEPLANE_CHECKOUT_LEASE_SECONDS:-120}"
me="$(hostname 2>/dev/null || echo pod)-$$"
waited=0
while ! mkdir "$lock" 2>/dev/null; do
  if [ -f "$ready" ]; then echo "checkout: $TUNEPLANE_WORK_DIR is ready"; exit 0; fi
  beat=$(stat -c %Y "$lock/owner" 2>/dev/null || stat -c %Y "$lock" 2>/dev/null || echo 0)
  if [ $(( $(date +%s) - beat )) -gt "$lease" ]; then
    owner=$(cat "$lock/owner" 2>/dev/null || echo "a pod that died")
    echo "checkout: taking over the lock of $owner: no heartbeat for ${lease}s" >&2
    mv "$lock" "$lock.stale.$me" 2>/dev/null && rm -rf "$lock.stale.$me"
    continue
  fi
  waited=$((waited + 1))
  if [ "$waited" -gt 1800 ]; then echo "checkout: gave up waiting for $ready" >&2; exit 1; fi
  sleep 1
done
echo "$me" > "$lock/owner"
( while sleep $(( lease / 4 + 1 )); do touch "$lock/owner" 2>/dev/null || exit 0; done ) </dev/null >/dev/null 2>&1 &
beat_pid=$!
trap 'kill "$beat_pid" 2>/dev/null || true; rm -rf "$lock"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
if [ -f "$ready" ]; then echo "checkout: $TUNEPLANE_WORK_DIR is ready"; exit 0; fi
find "$TUNEPLANE_RUN_DIR" -maxdepth 1 -name '.checkout.tmp*' -exec rm -rf {} +
tmp="$TUNEPLANE_RUN_DIR/.checkout.tmp.$me"
git init -q "$tmp"
cd "$tmp"
if [ -n "${GIT_PASSWORD:-}" ]; then
  git config credential.helper \
    '!f() { echo "username=${GIT_USERNAME:-git}"; echo "password=${GIT_PASSWORD}"; }; f'
fi
git remote add origin "$TUNEPLANE_REPO_URL"
git fetch -q --depth 1 origin "$TUNEPLANE_COMMIT" || git fetch -q origin
git -c advice.detachedHead=false checkout -q "$TUNEPLANE_COMMIT"
git config --unset credential.helper || true
mkdir -p .tuneplane tuneplane_plugins
for src in $TUNEPLANE_PLUGINS; do cp -R "$src" "tuneplane_plugins/${src##*/}"; done
printf '%s' "$TUNEPLANE_JOBSPEC" > .tuneplane/jobspec.json
cd /
rm -rf "$TUNEPLANE_WORK_DIR"
mv "$tmp" "$TUNEPLANE_WORK_DIR"
echo "checkout: $TUNEPLANE_COMMIT at $TUNEPLANE_WORK_DIR"
"""
