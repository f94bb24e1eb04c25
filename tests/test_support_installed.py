"""`support.installed.needs` skips for a missing package and never imports the one it finds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.installed import needs

TESTS = Path(__file__).resolve().parent


def test_a_missing_package_skips_the_test_naming_it() -> None:
    with pytest.raises(pytest.skip.Exception, match="^no_such_package_tp.sub is not installed$"):
        needs("json", "no_such_package_tp.sub")
    with pytest.raises(pytest.skip.Exception, match="^why$"):
        needs("no_such_package_tp", reason="why")


def test_an_installed_package_is_found_without_being_imported() -> None:
    # a fresh interpreter: this worker may have imported anything by now
    code = (
        "import sys\nfrom support.installed import needs\nneeds('xmlrpc.server', 'wsgiref.simple_server')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('xmlrpc', 'wsgiref')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=TESTS, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr
