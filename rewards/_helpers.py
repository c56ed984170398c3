"""Long-lived helper processes that answer one line per request under a wall clock, and a pool of
them, one per concurrent caller: where rewards/math.py runs math-verify and rewards/_judge.py makes
the code reward's verdicts, work whose cost the answer being judged can set.

A request past its deadline, or a helper that died, gets None and the helper is killed; the next
request starts a new one. Each helper is used by one thread at a time (the pool hands it out).
"""
import select
import subprocess
import tempfile
import threading


class Helper:
    """One helper process: `argv` prints "ready", then one answer line per request line."""

    def __init__(self, argv: list[str], env: dict, name: str, answers=("0", "1")):
        self.argv, self.env, self.name, self.answers = argv, env, name, answers
        self.proc = None

    def start(self):
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 - open while the helper lives
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errors, env=self.env, text=True, bufsize=1,
                                     start_new_session=True)
        if self._readline(60.0) != "ready":  # importing sympy takes ~1-2 s; a cold disk longer
            self.errors.seek(0)
            tail = self.errors.read()[-600:].decode(errors="replace")
            self.stop()
            raise RuntimeError(f"{self.name} failed to start: {tail}")

    def _readline(self, timeout: float) -> str | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().strip() if ready else None

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def ask(self, line: str, timeout: float) -> str | None:
        """The answer to one request line, or None (past `timeout`, out of memory, dead)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
            answer = self._readline(timeout)
        except (OSError, ValueError):
            answer = None
        if answer not in self.answers:  # not an answer: kill it, the next request starts anew
            self.stop()
            return None
        return answer


class Pool:
    """Helpers made by `make()`, at most `max_helpers` at once, so requests from several threads run
    side by side instead of queueing behind one slow answer. Thread-safe."""

    def __init__(self, make, max_helpers: int = 8):
        self.make, self.lock, self.idle, self.helpers = make, threading.Lock(), [], []
        self.slots = threading.BoundedSemaphore(max_helpers)

    def ask(self, line: str, timeout: float) -> str | None:
        """Helper.ask on an idle helper (a new one if none is idle); RuntimeError if it cannot
        start."""
        with self.slots:
            with self.lock:
                helper = self.idle.pop() if self.idle else None
                if helper is None:
                    helper = self.make()
                    self.helpers.append(helper)
            try:
                return helper.ask(line, timeout)
            finally:
                with self.lock:
                    self.idle.append(helper)

    def stop(self):
        with self.lock:
            for helper in self.helpers:
                helper.stop()
