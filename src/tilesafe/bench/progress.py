"""A progress bar on stderr: tqdm when it is installed, else a plain counter."""
from __future__ import annotations

import sys


class Progress:
    def __init__(self, total: int, enabled: bool = True, stream=None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self._bar = None
        if enabled:
            try:
                from tqdm import tqdm
                self._bar = tqdm(total=total, file=self.stream, unit="step", dynamic_ncols=True)
            except ImportError:
                pass

    def step(self, label: str, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_description_str(label[:60])
            self._bar.update(n)
        else:
            print(f"[{self.done}/{self.total}] {label}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
