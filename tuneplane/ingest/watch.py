"""The receiver's connection deadlines and caps: what a slow or greedy client may hold, and for how long."""

from __future__ import annotations

import json
import socket
import threading
import time
from http import HTTPStatus
from typing import Any

from tuneplane.ingest.gate import Limits


class Watch:
    """Connection deadlines: a request's headers, then its body, then the idle wait for the next one.

    A thread checks a few times a second; a connection past its deadline gets a 408 (unless it was
    idle) and is shut down, so a slow client holds a thread for a bounded time only.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conns: dict[socket.socket, list[Any]] = {}  # sock -> [phase, deadline, client]
        self.by_client: dict[str, int] = {}
        self.stopped = threading.Event()

    def add(self, sock: socket.socket, client: str, timeout: float, limits: Limits) -> str:
        with self.lock:
            if len(self.conns) >= limits.max_connections:
                return f"the receiver has {len(self.conns)} open connections; retry shortly"
            if self.by_client.get(client, 0) >= limits.max_per_client:
                return f"{limits.max_per_client} connections from {client} are open already; retry shortly"
            self.conns[sock] = ["headers", time.monotonic() + timeout, client]
            self.by_client[client] = self.by_client.get(client, 0) + 1
            return ""

    def remove(self, sock: socket.socket) -> None:
        with self.lock:
            entry = self.conns.pop(sock, None)
            if entry is not None:
                left = self.by_client.get(entry[2], 1) - 1
                if left > 0:
                    self.by_client[entry[2]] = left
                else:
                    self.by_client.pop(entry[2], None)

    def phase(self, sock: socket.socket, phase: str, timeout: float | None) -> bool:
        """Move a connection to `phase`; False when the watchdog has already closed it."""
        with self.lock:
            entry = self.conns.get(sock)
            if entry is None:
                return True  # not watched (tests that drive a handler directly)
            if entry[0] == "reaped":
                return False
            entry[0] = phase
            entry[1] = None if timeout is None else time.monotonic() + timeout
            return True

    def reap(self) -> int:
        now = time.monotonic()
        late: list[tuple[socket.socket, str]] = []
        with self.lock:
            for sock, entry in self.conns.items():
                if entry[1] is not None and entry[0] != "reaped" and now > entry[1]:
                    late.append((sock, entry[0]))
                    entry[0] = "reaped"
        for sock, phase in late:
            if phase != "idle":
                refuse_raw(sock, 408, f"the request did not arrive in time ({phase} deadline)")
            shutdown(sock)
        return len(late)

    def run(self) -> None:
        while not self.stopped.wait(0.2):
            self.reap()


def refuse_raw(sock: socket.socket, status: int, message: str) -> None:
    """Answer without a handler thread (over a cap, past a deadline): one non-blocking write."""
    body = json.dumps({"error": message}).encode()
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n").encode()
    try:
        sock.send(head + body, socket.MSG_DONTWAIT)
    except OSError:
        pass


def shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
