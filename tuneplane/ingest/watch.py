"""The receiver's connection deadlines and caps: what a slow or greedy client may hold, and for how long."""

from __future__ import annotations

import json
import socket
import threading
import time
from http import HTTPStatus

from tuneplane.ingest.gate import Limits
from tuneplane.runtime.records import Record


class _Conn(Record):
    """A watched connection: its phase, when that phase's time is up (None: no deadline), its client."""

    __slots__ = ("phase", "deadline", "client")
    _fields = __slots__

    def __init__(self, phase: str, deadline: float | None, client: str) -> None:
        self.phase, self.deadline, self.client = phase, deadline, client


class Watch:
    """Connection deadlines: a request's headers, then its body, then the idle wait for the next one.

    A thread checks a few times a second; a connection past its deadline gets a 408 (unless it was
    idle) and is shut down, so a slow client holds a thread for a bounded time only.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conns: dict[socket.socket, _Conn] = {}
        self.by_client: dict[str, int] = {}
        self.stopped = threading.Event()

    def add(self, sock: socket.socket, client: str, timeout: float, limits: Limits) -> str:
        with self.lock:
            if len(self.conns) >= limits.max_connections:
                return f"the receiver has {len(self.conns)} open connections; retry shortly"
            if self.by_client.get(client, 0) >= limits.max_per_client:
                return f"{limits.max_per_client} connections from {client} are open already; retry shortly"
            self.conns[sock] = _Conn("headers", time.monotonic() + timeout, client)
            self.by_client[client] = self.by_client.get(client, 0) + 1
            return ""

    def remove(self, sock: socket.socket) -> None:
        with self.lock:
            entry = self.conns.pop(sock, None)
            if entry is not None:
                left = self.by_client.get(entry.client, 1) - 1
                if left > 0:
                    self.by_client[entry.client] = left
                else:
                    self.by_client.pop(entry.client, None)

    def phase(self, sock: socket.socket, phase: str, timeout: float | None) -> bool:
        """Move a connection to `phase`; False when the watchdog has already closed it."""
        with self.lock:
            entry = self.conns.get(sock)
            if entry is None:
                return True  # not watched (tests that drive a handler directly)
            if entry.phase == "reaped":
                return False
            entry.phase = phase
            entry.deadline = None if timeout is None else time.monotonic() + timeout
            return True

    def reap(self) -> int:
        now = time.monotonic()
        late: list[tuple[socket.socket, str]] = []
        with self.lock:
            for sock, entry in self.conns.items():
                if entry.deadline is not None and entry.phase != "reaped" and now > entry.deadline:
                    late.append((sock, entry.phase))
                    entry.phase = "reaped"
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
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    ).encode()
    try:
        sock.send(head + body, socket.MSG_DONTWAIT)
    except OSError:
        pass


def shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
