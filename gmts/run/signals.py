"""Stop signals during training (Ctrl-C, SIGTERM): StopRequest finishes the current step, saves
and exits; before the first step gmts/run/folder.py's exit_on_interrupt ends the process at once."""
import contextlib
import signal
import sys
import time

import torch

from gmts.trainer import distributed


class Interrupted(Exception):
    """A signal during StopRequest.interruptible(): what ran there is abandoned."""


class StopRequest:
    """Ctrl-C / SIGTERM during training: finish the current step, write a checkpoint, exit, without
    starting the next evaluation. train.py asks any_process() again after each save, so a signal
    that arrives during a checkpoint write stops right after it; one during an in-training
    evaluation abandons it (interruptible). A second Ctrl-C stops at once (the last checkpoint is
    still whole: checkpoints are written atomically). Made when the first step starts: before it
    nothing is trained and gmts/run/folder.py's exit_on_interrupt ends the process at once."""

    GRACE_S = 5.0          # how long a user's reward may go on scoring after a signal (overdue)

    def __init__(self):
        self.signum, self._interruptible, self._since = 0, False, 0.0
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame):
        self.signum, self._since = signum, time.monotonic()
        signal.signal(signum, signal.SIG_DFL)
        print(f"\ngmts: got signal {signum}; checkpointing after this step (again to stop now)",
              file=sys.stderr, flush=True)
        if self._interruptible:
            self._interruptible = False
            raise Interrupted

    @contextlib.contextmanager
    def interruptible(self):
        """Inside, a signal raises Interrupted (one process's own work only: no collective may run
        there)."""
        self._interruptible = not self.signum
        try:
            yield
        finally:
            self._interruptible = False

    def overdue(self):
        """The signal's number once GRACE_S have passed since it came, else 0: a user's reward
        still running then is abandoned (rewards.set_interrupt_check), so a signal stops the run
        within seconds even while a reward hangs."""
        return self.signum if self.signum and time.monotonic() - self._since > self.GRACE_S else 0

    def any_process(self):
        """True on every process once any process was signalled."""
        return bool(int(distributed.all_reduce_sum(torch.tensor(self.signum))))
