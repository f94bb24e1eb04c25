"""The receiver's connection threads: reused when idle, started without making the accept loop wait.

`threading.Thread.start()` blocks until the new thread has run, and a new thread must first win the
GIL: with the handler threads busy parsing bodies, that wait is long, and the accept loop (one thread)
would wait that long per connection (bench/ingest_load.py measures it). Here a connection goes to an
idle thread through a queue; only when none is idle is a thread started, with
`_thread.start_new_thread`, which returns at once. Idle threads above `keep` end after `idle` seconds,
so a burst of jobs does not leave hundreds of threads behind.
"""

from __future__ import annotations

import _thread
import queue
import socket
import threading
from collections.abc import Callable

from tuneplane.runtime.reporter import plain

# A connection and its client's address, as socketserver hands them to process_request.
Serve = Callable[[socket.socket, object], None]


class Workers:
    def __init__(self, serve: Serve, limit: int, keep: int = 8, idle: float = 60.0) -> None:
        self.serve, self.limit, self.keep, self.idle_for = serve, limit, keep, idle
        self.jobs: queue.SimpleQueue[tuple[socket.socket, object] | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0  # threads waiting for a connection, less the connections queued for them
        self.count = 0  # threads alive
        self.started = 0  # threads ever started (tests and benchmarks read it)
        self.closed = False

    def submit(self, request: socket.socket, address: object) -> bool:
        """Hand a connection to a thread; False when `limit` threads are all busy (or closed)."""
        with self.lock:
            if self.closed:
                return False
            spawn = self.idle == 0
            if spawn:
                if self.count >= self.limit:
                    return False
                self.count += 1
                self.started += 1
            else:
                self.idle -= 1
        self.jobs.put((request, address))
        if spawn:
            try:
                _thread.start_new_thread(self._run, ())
            except RuntimeError:  # the system has no thread to give: take it back and refuse
                with self.lock:
                    self.count -= 1
                return False
        return True

    def _run(self) -> None:
        try:
            while True:
                try:
                    job = self.jobs.get(timeout=self.idle_for)
                except queue.Empty:
                    with self.lock:
                        if self.idle > 0 and self.count > self.keep:
                            self.idle -= 1  # nobody is waiting for this thread: it may end
                            self.count -= 1
                            return
                    continue
                if job is None:
                    with self.lock:
                        self.count -= 1
                    return
                self.serve(*job)  # answers and closes the connection; never raises
                with self.lock:
                    self.idle += 1
        except BaseException as exc:  # a thread that dies must not count as alive, and says why
            with self.lock:
                self.count -= 1
            plain.note(f"ingest: a connection thread ended: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Idle threads end now; busy ones when their connection is done (the server cuts them)."""
        with self.lock:
            self.closed = True
            alive = self.count
        for _ in range(alive):
            self.jobs.put(None)
