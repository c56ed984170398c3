"""The progress bar of every long phase (training, evaluation, analysis, tokenizing a large set).

    bar = Progress(total=n, desc="eval", unit="problem")    # tqdm's arguments
    with bar.doing("writing checkpoint step-3"):           # beside the bar's name while it runs

On a terminal it is tqdm's bar, redrawn in place (nested bars below each other). Anywhere else (a
log file, a pipe, a test's captured stream) every redraw stays as a line of its own, so a bar writes
a line only when its count, name or figures changed: no line of spaces to clear it, no copy of it
after a message (tqdm.write) or when it closes, and its last line ends there (leave=False too: a
file cannot take a line back).
"""
import contextlib
import sys

from tqdm import tqdm


class Progress(tqdm):
    """tqdm that writes each state of the bar once where lines cannot be redrawn."""

    def __init__(self, *args, **kwargs):
        stream = kwargs.get("file") or sys.stderr
        self.terminal = getattr(stream, "isatty", lambda: False)()
        self._shown = None                      # (count, name, figures) of the last line written
        super().__init__(*args, **kwargs)

    def _state(self):
        return self.n, self.desc, str(self.postfix)

    def display(self, msg=None, pos=None):
        if self.terminal:
            return super().display(msg, pos)
        if msg == "":                           # a clear: a file keeps its lines
            return False
        if msg is None and self._state() == self._shown:                  # a copy
            return True
        self._shown = self._state()
        self.fp.write((msg or self.__str__()) + "\n")   # a whole line: what follows starts anew
        self.fp.flush()
        return True

    def clear(self, nolock=False):
        if self.terminal:
            super().clear(nolock)

    def close(self):
        if not (self.terminal or self.disable):
            self.display()                      # the last state, once; no line after it
            self.leave = False
        super().close()

    @contextlib.contextmanager
    def doing(self, what):
        """`what` beside the bar's name while the block runs. A log keeps that line as the bar's
        state; a terminal shows the name alone again after."""
        if self.disable:
            yield
            return
        name = self.desc
        self.set_description_str(f"{name}: {what}")
        try:
            yield
        finally:
            self.set_description_str(name, refresh=self.terminal)
            if not self.terminal:
                self._shown = self._state()
