from tuneplane.cli.main import run

run()
