"""Run state, random streams and stop requests: what a checkpoint needs to resume a run exactly."""
from __future__ import annotations

import random
import signal
import threading
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class RunState:
    """Where a run stands: what a checkpoint holds beside the weights, the optimiser and the RNGs."""
    epoch: int = 0                 # epochs finished
    batch: int = 0                 # updates done in the current epoch
    step: int = 0                  # updates done in all
    loss_sum: float = 0.0          # of the current epoch's updates
    loss_n: int = 0
    first_loss: float | None = None
    bad: int = 0                   # consecutive updates with a diverging loss
    wall: float = 0.0              # seconds of earlier sessions of this run
    train_time: float = 0.0
    images: int = 0
    best_top1: float | None = None
    best_epoch: int | None = None
    crash: dict | None = None
    curves: dict = field(default_factory=lambda: dict(epoch=[], train_loss=[], lr=[], val_top1=[], val_loss=[]))


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)  # timm's Mixup draws from numpy, RandomErasing from random
    torch.manual_seed(seed)


def rng_state() -> dict:
    """RNG states as tensors and numbers, so ``torch.load(weights_only=True)`` reads them."""
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy": torch.from_numpy(keys.astype(np.int64)),
            "numpy_rest": [int(pos), int(has_gauss), float(gauss)],
            "python": torch.tensor(random.getstate()[1], dtype=torch.int64),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(("MT19937", s["numpy"].numpy().astype(np.uint32), *s["numpy_rest"]))
    random.setstate((3, tuple(s["python"].tolist()), None))
    if s["cuda"]:
        torch.cuda.set_rng_state_all(s["cuda"])


_requested = False  # a stop asked for between runs (a pool's idle worker): the next run stops at once
_for_good = False   # in a pool's worker a stop is final: the runs already queued to it stop at once too


def request_stop(*_) -> None:
    """Signal handler for a worker between runs: its next run stops after one step (checkpointed)."""
    global _requested
    _requested = True


def stops_for_good() -> None:
    """Called in a pool's worker: a SIGTERM during a run also stops the runs queued behind it (the
    pool hands a worker its next run before shutdown can cancel it)."""
    global _for_good
    _for_good = True


class StopOnSignal:
    """Ctrl-C / SIGTERM ask the loop to stop after the current step (a second Ctrl-C stops now)."""
    flag = False

    def __enter__(self):
        self.flag, self.old = _requested, {}
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self.old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, *_):
        if self.flag:
            raise KeyboardInterrupt
        self.flag = True
        if _for_good:
            request_stop()

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)
