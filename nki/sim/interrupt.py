"""Ctrl-C while compiled code runs: the stop word, and who sets it.

Python runs a signal's handler only on the main thread, between bytecodes: while the main
thread is inside a compiled program, a KeyboardInterrupt would wait for the whole program.
So every program checks a stop word (``L[STOP_SLOT]``) before each instruction, and while a
kernel runs on the main thread this module makes SIGINT set it:

* ``signal.set_wakeup_fd`` makes the interpreter's C-level signal handler write the signal's
  number to a pipe the moment the signal arrives, whatever the main thread is doing;
* a daemon thread blocked on that pipe sets the stop word of every running core; the programs
  return at their next instruction, and the main thread, back in Python, raises the
  KeyboardInterrupt its handler queued.

A wakeup fd installed before (asyncio's) is restored afterwards and receives every byte in the
meantime. Off the main thread nothing is installed: signals are delivered to the main thread.

A signal's byte may still sit in the pipe, unread, when its watch ends (the reading thread is
slow to wake on a loaded machine); read later, it would stop the *next* run, which then raises
a KeyboardInterrupt nobody sent. So the outermost watch ends with a marker byte of its own and
waits until the thread has read it, and with it every byte before it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import numpy as np

from nki.sim.codegen import STOP_SLOT


class _Watcher:
    """The pipe, the thread reading it, and the stop words of the runs being watched."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        self.lock = threading.Lock()
        self.watched: dict[int, list[np.ndarray]] = {}   # id of a watch -> its stop words
        self.forward: int = -1                            # the wakeup fd we replaced
        self.drained = threading.Event()                  # the thread read our marker
        threading.Thread(target=self._read, name="nki-interrupt-watch", daemon=True).start()

    def _read(self) -> None:
        while True:
            data = os.read(self.read_fd, 64)
            marker = _MARKER in data
            data = data.replace(bytes([_MARKER]), b"")
            with self.lock:
                if signal.SIGINT in data:
                    for words in self.watched.values():
                        for lv in words:
                            lv[STOP_SLOT] = 1
                forward = self.forward
            if forward >= 0 and data:
                with contextlib.suppress(OSError):
                    os.write(forward, data)
            if marker:
                self.drained.set()

    def drain(self) -> None:
        """Return once every byte written to the pipe so far has been read (bounded wait: a
        thread that cannot run within a second leaves the risk, not a hang)."""
        self.drained.clear()
        with contextlib.suppress(OSError):
            os.write(self.write_fd, bytes([_MARKER]))
            self.drained.wait(1.0)


_MARKER = 0                      # no signal has number 0
_WATCHER: _Watcher | None = None
_WATCHER_LOCK = threading.Lock()


def _watcher() -> _Watcher:
    global _WATCHER
    with _WATCHER_LOCK:
        if _WATCHER is None:
            _WATCHER = _Watcher()
        return _WATCHER


@contextlib.contextmanager
def watching(loopvars: list[np.ndarray]):
    """While the block runs on the main thread, SIGINT sets the stop word of each ``L`` in
    ``loopvars``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    w = _watcher()
    key = id(loopvars)
    with w.lock:
        if not w.watched:   # the outermost watch installs the pipe (main thread only)
            w.forward = signal.set_wakeup_fd(w.write_fd)
        w.watched[key] = loopvars
    try:
        yield
    finally:
        with w.lock:
            del w.watched[key]
            outermost = not w.watched
            if outermost:   # the outermost watch restores what was there
                signal.set_wakeup_fd(w.forward)
                w.forward = -1
        if outermost:
            w.drain()


def stop(loopvars: list[np.ndarray]) -> None:
    """Set the stop words: each program returns before its next instruction."""
    for lv in loopvars:
        lv[STOP_SLOT] = 1
