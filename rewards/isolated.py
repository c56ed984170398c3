"""Custom rewards in a process of their own (what train.py, eval.py and gmts.tools score with).

A user's reward function (`--reward FILE:fn` or `package.module:fn`) is imported and called in one
worker process per Scorer, started once and started again after a failure; built-in rewards stay
in the trainer (our code: math and choice are string parsing, code runs its own sandbox). What the
trainer gets from this:

- its own process survives whatever the function does: `sys.exit`, `os._exit`, a segfault, a
  `KeyboardInterrupt` it raises, an exception, each one line naming the reward (RewardError);
- every call is bounded in time (`timeout` seconds from the call's start, --reward-timeout): a call
  that does not return is stopped by killing the worker, and named;
- every call receives copies (each call's arguments are pickled on their own), so a function that
  changes its row changes nothing the trainer or a later call sees;
- `interrupt_check` (set_interrupt_check): a signal the trainer got ends the wait within a fraction
  of a second (ScoringStopped), however long a call takes.

Protocol on the worker's stdin/stdout (the user's prints go to stderr): length-prefixed pickles.
parent -> worker: the parent's sys.path and the SPECs; then ("score", [job bytes], concurrent).
worker -> parent: ("ready", [metadata]) or ("failed", message, details); per call ("start", k) and
("end", k); per batch ("scores", values) or ("error", message, details).
"""

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
import weakref

DEFAULT_TIMEOUT = 60.0     # s per call: a model judge over HTTP fits, a hang is named in a minute
_POLL_S = 0.2              # how often a wait looks at interrupt_check
_HEADER = struct.Struct("<Q")
_LIVE = weakref.WeakSet()  # workers to stop when the trainer exits
_interrupt_check = None


class RewardError(Exception):
    """A reward that cannot be loaded or called: `str(err)` is one line naming the reward (its
    SPEC), `details` the user's own traceback (may be empty). `for_cli()` is both, for a
    SystemExit."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details

    def for_cli(self, note: str = "") -> str:
        """`error: <the line><note>`, then the user's traceback."""
        return f"error: {self}{note}" + (f"\n{self.details.rstrip()}" if self.details else "")


class ScoringStopped(Exception):
    """The trainer was signalled while rewards were being scored: the batch was abandoned and the
    worker stopped. `signum` is the signal."""

    def __init__(self, signum):
        super().__init__(f"stopped by signal {signum} while scoring")
        self.signum = signum


def set_interrupt_check(fn):
    """fn() -> a signal number (non-zero) once the process was asked to stop, else 0: every wait
    on a worker returns within _POLL_S of it becoming non-zero (ScoringStopped). None: no check."""
    global _interrupt_check
    _interrupt_check = fn


def _signal_name(code: int) -> str:
    try:
        return f"killed by signal {-code} ({signal.Signals(-code).name})"
    except ValueError:
        return f"killed by signal {-code}"


class WorkerProcess:
    """The parent's end of one worker: start(specs) -> metadata per SPEC; score(jobs) -> values."""

    def __init__(self, specs, *, trusted_only=False, workers=1, timeout=DEFAULT_TIMEOUT):
        self.specs, self.trusted_only, self.workers = list(specs), trusted_only, workers
        self.timeout = float(timeout)
        self.proc, self.meta, self._buf = None, None, b""

    # ---- the process
    def start(self):
        """Starts the worker and imports the rewards there: their metadata (dicts, in SPEC order).
        A reward that does not load is a RewardError (the user's traceback in its details)."""
        import gmts
        root = os.path.dirname(os.path.dirname(os.path.abspath(gmts.__file__)))   # gmts's parent
        boot = (f"import sys; sys.path.insert(0, {root!r}); "
                "from gmts.rewards._reward_worker import serve; serve()")
        self.proc = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, start_new_session=True)
        _LIVE.add(self)
        self._buf = b""
        self._send((list(sys.path), self.specs, self.trusted_only, self.workers))
        names = ", ".join(self.specs)
        msg = self._receive(lambda _: (f"--reward {names}: importing it", ""), {})
        if msg[0] == "failed":
            self.stop()
            raise RewardError(msg[1], msg[2])
        self.meta = msg[1]
        return self.meta

    def stop(self):
        """Kills the worker (its process group: what the user's code started too)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for closing in (proc.stdin, proc.stdout):
            try:
                closing.close()
            except OSError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        _LIVE.discard(self)

    # ---- one batch
    def score(self, jobs, concurrent, describe):
        """Values of the pickled `jobs` (bytes each), run in the worker. describe(k) -> (the
        reward's '--reward SPEC: fn', ' on problem P (completion ...)') for job k, for messages.
        Any failure stops the worker (the next batch starts a fresh one) and raises RewardError."""
        if self.proc is None:
            self.start()
        try:
            self._send(("score", jobs, concurrent))
            running = {}                 # job -> when it started
            msg = self._receive(describe, running)
        except BaseException:
            self.stop()
            raise
        if msg[0] == "error":
            self.stop()
            raise RewardError(msg[1], msg[2])
        return msg[1]

    def _send(self, obj):
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(_HEADER.pack(len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass                         # it died: _receive says how

    def _receive(self, describe, running):
        """The next message that is not a call's start or end, keeping `running` up to date;
        RewardError for a worker that died or a call that ran out of time."""
        fd = self.proc.stdout.fileno()
        started = time.monotonic()       # the import (no call started yet) is bounded the same way
        while True:
            while len(self._buf) >= _HEADER.size:
                size = _HEADER.unpack_from(self._buf)[0]
                if len(self._buf) < _HEADER.size + size:
                    break
                msg = pickle.loads(self._buf[_HEADER.size:_HEADER.size + size])
                self._buf = self._buf[_HEADER.size + size:]
                if msg[0] == "start":
                    running[msg[1]] = time.monotonic()
                elif msg[0] == "end":
                    running.pop(msg[1], None)
                else:
                    return msg
            signum = _interrupt_check() if _interrupt_check else 0
            if signum:
                self.stop()
                raise ScoringStopped(signum)
            oldest = min(running.items(), key=lambda kv: kv[1]) if running else None
            since = oldest[1] if oldest else started
            if time.monotonic() - since > self.timeout:
                self.stop()
                spec, where = describe(oldest[0]) if oldest else describe(None)
                raise RewardError(f"{spec} did not return within {self.timeout:g} s{where}; "
                                  "it was stopped (raise --reward-timeout if it needs longer)")
            ready, _, _ = select.select([fd], [], [], _POLL_S)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if chunk:
                    self._buf += chunk
                    continue
                code = self.proc.wait()
                self.stop()
                spec, where = describe(min(running, key=running.get) if running else None)
                how = (_signal_name(code) if code < 0
                       else f"exit status {code}, without returning: os._exit?")
                raise RewardError(f"{spec} ended its worker process ({how}){where}; the "
                                  "trainer's own process is unharmed")


@atexit.register
def _stop_all():
    for worker in list(_LIVE):
        worker.stop()
