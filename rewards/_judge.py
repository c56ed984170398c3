"""The code reward's verdicts, made in helper processes under a deadline and a memory limit.

Judging evaluates the test's own expression over values the solution chose, so its cost is the solution's to set
(`math.gcd` of two huge ints, `pow(a, b, m)` on them, `sum(lists, [])`). Rather than guard each operation, every
verdict is made in a helper (rewards/_judge_worker.py, RLIMIT_AS JUDGE_MEMORY_MB) that has JUDGE_TIMEOUT_S of wall
clock; past it the helper is killed (verdict: fail) and restarted on its next use. Helpers form a pool, one per
concurrent caller up to 8, as rewards/math.py's math-verify helpers do.
"""
import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading

JUDGE_TIMEOUT_S = 5.0  # wall clock per verdict, on top of the run's own limit
JUDGE_MEMORY_MB = 4096
_HERE = os.path.dirname(os.path.abspath(__file__))


class _Helper:
    """One judge process; used by one thread at a time (the pool hands it out)."""

    def __init__(self):
        self.proc = None

    def start(self):
        env = dict(os.environ, GMTS_JUDGE_PATH=json.dumps([os.path.dirname(_HERE)]), OMP_NUM_THREADS="1")
        self.errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-I", os.path.join(_HERE, "_judge_worker.py"),
                                      str(JUDGE_MEMORY_MB)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errors, env=env, text=True, bufsize=1, start_new_session=True)
        if self._readline(60.0) != "ready":
            self.errors.seek(0)
            tail = self.errors.read()[-600:].decode(errors="replace")
            self.stop()
            raise RuntimeError(f"the code reward's judge process failed to start: {tail}")

    def _readline(self, timeout: float) -> str | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().strip() if ready else None

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def verdict(self, line: str, timeout: float) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
            answer = self._readline(timeout)
        except (OSError, ValueError):
            answer = None
        if answer not in ("0", "1"):  # past the deadline, out of memory or dead: kill it, not a pass
            self.stop()
            return False
        return answer == "1"


class _Pool:
    def __init__(self, max_helpers: int = 8):
        self.lock, self.idle, self.helpers = threading.Lock(), [], []
        self.slots = threading.BoundedSemaphore(max_helpers)

    def verdict(self, message: dict, timeout: float) -> bool:
        line = json.dumps(message) + "\n"
        with self.slots:
            with self.lock:
                helper = self.idle.pop() if self.idle else None
                if helper is None:
                    helper = _Helper()
                    self.helpers.append(helper)
            try:
                return helper.verdict(line, timeout)
            finally:
                with self.lock:
                    self.idle.append(helper)

    def stop(self):
        with self.lock:
            for helper in self.helpers:
                helper.stop()


_pool = _Pool()
atexit.register(lambda: _pool.stop())  # no orphaned helper when the trainer exits


def verdict(message: dict, timeout: float = JUDGE_TIMEOUT_S) -> bool:
    """Does this run's report pass its tests? message: {"tests", "entry_point", "setup", "nonce", "report"}
    (see testplan.verdict). Made in a helper process; False past `timeout` seconds or the memory limit."""
    return _pool.verdict(message, timeout)
