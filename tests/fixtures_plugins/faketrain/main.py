"""`python -m faketrain.main --out result.json`: the training entrypoint the launcher starts."""

from __future__ import annotations

import argparse
import json
import os
import sys

LAUNCHER_LOADED = "tuneplane.plugins" in sys.modules  # True only when run in the launcher's interpreter


class Tokenizer:
    """Built by the trainer at start-up: what a deferred plugin needs from its context."""

    def __init__(self) -> None:
        self.vocab = {"hello": 0, "world": 1, "!": 2}

    def encode(self, text: str) -> list[int]:
        return [self.vocab.get(word, 0) for word in text.split()]


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--deferred", action="append", default=[], help="install_deferred(NAME, ...)")
    parser.add_argument("--reinstall", action="store_true", help="run the launcher's install again")
    parser.add_argument("--deferred-twice", action="store_true")
    return parser.parse_args(argv)


def main() -> None:
    args = _args()
    from faketrain import algorithms

    result: dict[str, object] = {
        "launcher_loaded": LAUNCHER_LOADED,
        "argv": sys.argv,
        "name": __name__,
        "cwd": os.getcwd(),
    }
    if args.reinstall:
        from tuneplane.launcher import install_plugins, read_jobspec, work_dir

        result["reinstalled"] = [p.id for p in install_plugins(read_jobspec(work_dir()), work_dir())]
    tokenizer = Tokenizer()
    installed = []
    for name in args.deferred:
        from tuneplane.plugins import install_deferred

        installed.append(install_deferred(name, tokenizer=tokenizer, max_seq_len=4096))
        if args.deferred_twice:
            installed.append(install_deferred(name, tokenizer=tokenizer, max_seq_len=1))
    result.update(
        deferred_installed=installed,
        advantages=algorithms.compute_advantages([1.0, 2.0, 3.0]),
        token_budget=algorithms.token_budget("hello world !"),
        patch_calls=algorithms.PATCH_CALLS,
    )
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
