"""Sharpness-Aware Minimization (Foret et al., ICLR 2021) around any torch optimizer.

No maintained PyPI package provides it, and it is two short steps:

    g   = grad L(w)                        (first backward)
    e   = rho * g / ||g||                  (global L2 norm over all parameters)
    w  <- w + e             `ascent()`      climb to the worst point nearby
    g'  = grad L(w + e)                    (second backward)
    w  <- w - e; base.step() with g'       `descent()`

The wrapper shares ``param_groups`` with the base optimizer, so timm schedulers set its lr.
"""
from __future__ import annotations

import torch


class SAM:
    def __init__(self, base: torch.optim.Optimizer, rho: float = 0.05):
        if rho <= 0:
            raise ValueError(f"SAM rho must be > 0, got {rho}")
        self.base, self.rho = base, rho
        self.param_groups = base.param_groups
        self._moved: list[tuple[torch.Tensor, torch.Tensor]] = []

    @torch.no_grad()
    def ascent(self) -> None:
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
        scale = self.rho / (norm + 1e-12)
        for p in params:
            e = p.grad * scale
            p.add_(e)
            self._moved.append((p, e))

    @torch.no_grad()
    def descent(self) -> None:
        for p, e in self._moved:  # back to w; the gradients now in .grad were taken at w + e
            p.sub_(e)
        self._moved.clear()
        self.base.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.base.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return self.base.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.base.load_state_dict(state)
