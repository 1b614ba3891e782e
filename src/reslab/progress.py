"""A progress display: one self-updating bar on a terminal, plain lines otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time


def format_duration(seconds: float) -> str:
    """45 s, 22 min, 1 h 05 min: a length of time that cannot be read as a time of day."""
    seconds = max(float(seconds), 0.0)
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """Progress(total, "train").update(done, loss=1.23) ... .close().

    mode: "auto" (bar on a terminal, else lines), "bar", "lines", or "off". Plain lines are printed
    at most every `line_every` seconds, and always for the last update."""

    def __init__(self, total: int, desc: str = "", mode: str = "auto", stream=None, line_every: float = 10.0):
        self.total, self.desc, self.stream = max(int(total), 1), desc, stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "lines"
        self.mode, self.line_every = mode, line_every
        self.start = time.perf_counter()
        self.first_done: int | None = None
        self.last_print = -float("inf")
        self.done = 0

    def _eta(self) -> str:
        elapsed = time.perf_counter() - self.start
        base = self.first_done or 0
        if self.done <= base:
            return "--"
        return format_duration(elapsed / (self.done - base) * (self.total - self.done))

    def update(self, done: int, **fields) -> None:
        if self.first_done is None:
            self.first_done = done  # a resumed run starts part-way: its rate counts from here
        self.done = min(int(done), self.total)
        if self.mode == "off":
            return
        now = time.perf_counter()
        final = self.done >= self.total
        info = "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in fields.items()
                         if v is not None)
        if self.mode == "bar":
            if now - self.last_print < 0.1 and not final:
                return
            width = 24
            filled = int(width * self.done / self.total)
            bar = "#" * filled + "-" * (width - filled)
            line = f"\r{self.desc} [{bar}] {self.done}/{self.total}  {info}  eta {self._eta()}"
            self.stream.write(line + ("\n" if final else ""))
        else:
            if now - self.last_print < self.line_every and not final:
                return
            self.stream.write(f"{self.desc} {self.done}/{self.total}  {info}  eta {self._eta()}\n")
        self.stream.flush()
        self.last_print = now

    def message(self, text: str) -> None:
        """A line that must not be overwritten (an evaluation result, a warning)."""
        if self.mode == "off":
            return
        prefix = "\r\033[K" if self.mode == "bar" else ""
        self.stream.write(prefix + text + "\n")
        self.stream.flush()
        self.last_print = -float("inf")

    def close(self) -> None:
        if self.mode == "bar" and self.done < self.total:
            self.stream.write("\n")
            self.stream.flush()
