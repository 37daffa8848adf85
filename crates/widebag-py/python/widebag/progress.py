"""The progress bar of ``train``: tqdm's (``tqdm.auto``: a widget in Jupyter, text in a
terminal) when tqdm is installed, else a plain bar redrawn on stderr."""

import json
import sys
import time


class _Plain:
    """A bar on stderr: steps, epoch, loss and the last evaluation."""

    def __init__(self, total):
        self.total, self.n, self.started, self.postfix = total, 0, time.monotonic(), ""
        self.shown = 0.0

    def update(self, n):
        self.n += n
        now = time.monotonic()
        if now - self.shown < 0.2 and self.n < self.total:
            return
        self.shown = now
        width = 30
        done = int(width * self.n / max(self.total, 1))
        bar = "#" * done + "-" * (width - done)
        sys.stderr.write(f"\r{bar} {self.n}/{self.total} steps  {self.postfix}  [{now - self.started:.0f}s]")
        sys.stderr.flush()

    def set_postfix_str(self, text, refresh=False):
        self.postfix = text

    def close(self):
        sys.stderr.write("\n")
        sys.stderr.flush()


class Progress:
    """Called with each step's stats (the JSON the metrics log has) and the run's steps."""

    def __init__(self, enabled):
        self.enabled, self.bar, self.last_eval = enabled, None, ""

    def __call__(self, line, total):
        if not self.enabled:
            return
        s = json.loads(line)
        if self.bar is None:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, initial=s["step"] - 1, unit="step")
            except ImportError:
                self.bar = _Plain(total)
                self.bar.n = s["step"] - 1
        ev = s.get("eval")
        if ev:
            shown = ev.get("metrics", [])[:3]
            self.last_eval = "  " + "  ".join(f"{m['name']} {m['value']:.4f}" for m in shown)
        epoch = f"epoch {s['epoch']}  " if s.get("epoch") is not None else ""
        self.bar.set_postfix_str(f"{epoch}loss {s['loss']:.4f}{self.last_eval}", refresh=False)
        self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()
