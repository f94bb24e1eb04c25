"""The constant shell and Python text rendered pods run: the checkout init script and the SDK bootstrap."""

from __future__ import annotations

# Runs the launcher from the SDK directory when the image has no tuneplane; with platform
# observability the directory is also prepended to PYTHONPATH for the trainer (CONTRACT §7).
BOOTSTRAP = (
    "import os, sys\n"
    "sdk, mode = sys.argv[1], sys.argv[2]\n"
    "del sys.argv[1:]\n"
    "if mode == \"prepend\":\n"
    "    old = os.environ.get(\"PYTHONPATH\")\n"
    "    os.environ[\"PYTHONPATH\"] = os.pathsep.join(p for p in (sdk, old) if p)\n"
    "sys.path.insert(0, sdk)\n"
    "from tuneplane.launcher import main\n"
    "sys.exit(main([]))\n"
)


# The init container's script: constant text, every value arrives as an environment variable.
# One pod of a run clones (a mkdir lock on the shared volume), the others wait for its result.
CHECKOUT_SCRIPT = r"""set -eu
set -f
umask 022
mkdir -p "$TUNEPLANE_RUN_DIR" "$TUNEPLANE_OUT_DIR"
ready="$TUNEPLANE_WORK_DIR/.tuneplane/jobspec.json"
if [ -f "$ready" ]; then echo "checkout: $TUNEPLANE_WORK_DIR is ready"; exit 0; fi
if ! mkdir "$TUNEPLANE_RUN_DIR/.checkout.lock" 2>/dev/null; then
  waited=0
  while [ ! -f "$ready" ]; do
    waited=$((waited + 1))
    if [ "$waited" -gt 1800 ]; then echo "checkout: gave up waiting for $ready" >&2; exit 1; fi
    sleep 1
  done
  echo "checkout: $TUNEPLANE_WORK_DIR is ready"; exit 0
fi
tmp="$TUNEPLANE_RUN_DIR/.checkout.tmp"
rm -rf "$tmp"
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
mv "$tmp" "$TUNEPLANE_WORK_DIR"
echo "checkout: $TUNEPLANE_COMMIT at $TUNEPLANE_WORK_DIR"
"""
