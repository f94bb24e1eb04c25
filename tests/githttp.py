"""A real git smart-HTTP server on 127.0.0.1: `git http-backend` behind a small HTTP server with basic auth.

Pods clone the lab from `cluster.repo.url` with the credentials of `cluster.repo.credentials_secret`;
this server plays the git host, so the init container's script is tested against the same protocol,
the same 401 challenge and the same credential helper a real host uses. Stopped by `stop()` (its own
thread), every request bounded by a timeout.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CGI_TIMEOUT = 60


class GitHttpServer:
    """Serves every bare repository under `root` at `http://127.0.0.1:<port>/<name>.git`."""

    def __init__(self, root: Path, username: str = "", password: str = "") -> None:
        self.root = root
        self.credentials = (username, password) if username else None
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> GitHttpServer:
        server = self

        class Handler(_GitHandler):
            git = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="git-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def url(self, repo: str) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/{repo}"

    def publish(self, source: Path, name: str) -> str:
        """A bare clone of `source` as `<name>`, served; returns its URL."""
        target = self.root / name
        if target.exists():
            shutil.rmtree(target)
        subprocess.run(["git", "clone", "-q", "--bare", str(source), str(target)], check=True, timeout=60)
        subprocess.run(["git", "-C", str(target), "config", "http.receivepack", "false"], check=True, timeout=30)
        return self.url(name)


class _GitHandler(BaseHTTPRequestHandler):
    git: GitHttpServer
    protocol_version = "HTTP/1.0"  # the CGI's output is streamed to the end of the connection

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        user = self._authorised()
        if user is None:
            self.git.requests.append((method, parts.path, 401))
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="lab"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.git.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "REQUEST_METHOD": method,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": user,
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
        }
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, timeout=CGI_TIMEOUT, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        headers = [line.split(":", 1) for line in head.decode("latin-1").split("\r\n") if ":" in line]
        status = 200
        for name, value in headers:
            if name.lower() == "status":
                status = int(value.strip().split()[0])
        self.git.requests.append((method, parts.path, status))
        self.send_response(status)
        for name, value in headers:
            if name.lower() != "status":
                self.send_header(name, value.strip())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _authorised(self) -> str | None:
        if self.git.credentials is None:
            return "anonymous"
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return user if (user, password) == self.git.credentials else None
