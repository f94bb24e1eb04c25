# Tasks a contributor runs; CONTRIBUTING.md says when. Every target uses the current Python environment
# (`make install` first on a fresh machine).
PYTHON ?= python
PYTEST = $(PYTHON) -m pytest -n 4 -q  # as the README's test command: four workers fill the suite's waits

.PHONY: install test-fast test ci lint format schemas docs sizes

install:  ## the project and its test dependencies, editable
	$(PYTHON) -m pip install -e '.[test]' 'torch==2.13.0'

test-fast:  ## the fast lane: no process trees, clusters, trainers, Slurm or bulk volumes (the first thing to run)
	$(PYTEST) -m "not (process or cluster or trainer or slurm or bulk)"

test:  ## the whole suite, as CI runs it
	$(PYTEST)

ci:  ## what CI runs on a fresh machine: install everything, then the README's test command
	bash .ci/run

lint:  ## ruff, the format check, mypy --strict and the import contracts
	ruff check .
	ruff format --check .
	$(PYTHON) -m mypy tuneplane
	lint-imports

format:  ## format the tree (ruff format) and sort imports
	ruff check --select I --fix .
	ruff format .

schemas:  ## regenerate schemas/ from the models (a test fails when they drift)
	$(PYTHON) -m tuneplane.dev.schemagen

docs:  ## regenerate the command reference
	$(PYTHON) -m tuneplane.dev.docgen

sizes:  ## the largest modules and longest functions, for review (nothing fails on a size)
	$(PYTHON) -m tuneplane.dev.sizes
