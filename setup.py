"""Packages are found automatically; the top-level data folders ship inside the package.

`schemas/`, `catalog/` and `templates/` live at the repository root (they are reviewed like code) and
are mapped into `tuneplane._data.*` so the installed tool reads them through importlib.resources.
"""

from setuptools import find_packages, setup

DATA = ["tuneplane._data.schemas", "tuneplane._data.catalog", "tuneplane._data.templates"]

setup(packages=find_packages(include=["tuneplane", "tuneplane.*"]) + DATA)
