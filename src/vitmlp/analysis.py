"""Numbers computed from trained weights, for the `analysis` items.

    sparsity(w)                  # share of |w| below 5% of max |w| (ResMLP Figures 3, B.2)
    locality(A, grid)            # per cross-patch matrix: where each row's weight mass sits (Figures 2, B.1)
    central_rows(A, grid, k)     # rows of A for the k x k central patches, as (k, k, grid, grid) images
"""
from __future__ import annotations

import torch


def sparsity(w: torch.Tensor, rel: float = 0.05) -> float:
    """Fraction of entries whose magnitude is below ``rel`` times the largest magnitude."""
    a = w.detach().abs().flatten().float()
    return float((a < rel * a.max()).float().mean())


def _positions(grid: int) -> torch.Tensor:
    """(N, 2) row/column of each patch in raster order."""
    return torch.stack(torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij"), -1).view(-1, 2)


def locality(A: torch.Tensor, grid: int, radius: int = 1) -> dict:
    """Where the weight mass |A[i, :]| of an output patch i sits, averaged over the patches whose
    (2 radius + 1)^2 neighbourhood fits inside the grid:

    ``self``: share on the patch itself (a "spike"); ``near``: share on the other patches within
    Chebyshev distance ``radius`` (a convolution-like support); ``far``: the rest; ``near_uniform``:
    the ``near`` share that weights spread evenly would give, so near / near_uniform > 1 means local.
    """
    N = grid * grid
    if A.shape != (N, N):
        raise ValueError(f"A must be ({N}, {N}) for a {grid}x{grid} grid, got {tuple(A.shape)}")
    pos = _positions(grid)
    dist = (pos[:, None, :] - pos[None, :, :]).abs().amax(-1)                # (N, N) Chebyshev
    inner = ((pos >= radius) & (pos < grid - radius)).all(-1)               # neighbourhood fits
    m = A.detach().abs().float()[inner]
    m = m / m.sum(1, keepdim=True)
    d = dist[inner]
    near_n = (2 * radius + 1) ** 2 - 1
    return {"self": float(m[d == 0].mean()), "near": float((m * ((d > 0) & (d <= radius))).sum(1).mean()),
            "far": float((m * (d > radius)).sum(1).mean()), "near_uniform": near_n / N}


def central_rows(A: torch.Tensor, grid: int, k: int) -> torch.Tensor:
    """Rows of A for the k x k central output patches, each as a grid x grid image: (k, k, grid, grid)."""
    if not 0 < k <= grid:
        raise ValueError(f"k must be in 1..{grid}, got {k}")
    lo = (grid - k) // 2
    idx = [(lo + r) * grid + lo + c for r in range(k) for c in range(k)]
    return A.detach()[idx].view(k, k, grid, grid)
