"""A real `tp ingest serve` in its own process, for tests that need the receiver as a job meets it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


class ServeProcess:
    """`tp ingest serve` on a free loopback port, with its own database and secret file."""

    def __init__(self, tmp: Path, secret: bytes) -> None:
        self.db = tmp / "ingest.sqlite"
        secret_file = tmp / "ingest.secret"
        secret_file.write_bytes(secret)
        argv = [sys.executable, "-m", "tuneplane", "ingest", "serve", "--port", "0", "--db", str(self.db)]
        self.proc = subprocess.Popen([*argv, "--secret-file", str(secret_file)], stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        assert "listening on " in line, line + self.proc.stderr.read()
        self.url = line.split("listening on ")[1].split()[0]
        host, port = self.url[len("http://") :].split(":")
        self.host, self.port = host, int(port)

    def stop(self) -> str:
        """Stop it as a person would (SIGTERM); what it said on stderr."""
        if self.proc.poll() is not None:
            return ""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=30)
        return err
