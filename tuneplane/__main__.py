"""`python -m tuneplane`: the `tp` command."""

from tuneplane.cli.main import run

run()
