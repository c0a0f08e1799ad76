"""The two theorems of Scaled ReLU (Wang et al., 2022), checked by computation.

Notation is the paper's: ``ReLU_{alpha,beta}(x) = beta * max(x + alpha, 0)``; in a BatchNorm
followed by ReLU, ``beta`` is BN's scale (``bn.weight``) and ``alpha`` its shift (``bn.bias``).

Theorem 2 (token similarity), on tokens with i.i.d. zero-mean entries:

    cos_sim(B)                    # eq. (5): mean cosine over the n(n-1) pairs of distinct rows
    cos_bound(B)                  # eq. (6): (||B||_op^2 / min_i ||B_i||^2 - 1) / (n - 1)
    token_similarity(alphas, betas, n=196, d=384, trials=20)   # before / after, one row per draw
    gaussian_cos_sim(alpha, d)    # closed form of E[cos_sim] after ReLU_{alpha,beta}, N(0, 1) entries

Theorem 1 (rescaling), on a toy where only the last BN's (alpha, beta) and W_QKV train:

    p = toy_problem(channels=16, tokens=512, outputs=12, seed=0)
    fit_l2(p, weight_decay=1e-2)            # min L + lam (|alpha|^2 + |beta|^2 + |W|^2), L-BFGS
    fit_group_lasso(p, weight_decay=1e-2)   # min L + 2 lam sum_c ||V_c||, the predicted penalty
    rescale_stem(model, eta, partner)       # the same symmetry in the book's ViT with the VOLO stem
"""
from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import torch
from scipy.stats import norm

from .choices import check_choice

# Zero-mean, unit-variance entry distributions: Theorem 2 holds for any zero-mean D.
DISTS = {
    "gaussian": lambda rng, shape: rng.standard_normal(shape),
    "uniform": lambda rng, shape: rng.uniform(-math.sqrt(3), math.sqrt(3), shape),
    "laplace": lambda rng, shape: rng.laplace(0.0, 1 / math.sqrt(2), shape),
    "rademacher": lambda rng, shape: rng.choice([-1.0, 1.0], shape),   # alpha <= -1 zeroes every token
}


def scaled_relu(x, alpha: float, beta: float):
    """The paper's ReLU_{alpha,beta}(x) = beta * max(x + alpha, 0)."""
    return beta * np.maximum(x + alpha, 0.0)


def _row_norms(B: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(B, axis=1)
    if (norms == 0).any():
        raise ValueError(f"{int((norms == 0).sum())} of {len(B)} tokens are all zero: their cosine is "
                         "undefined (a shift alpha far below 0 with small d); use a larger alpha or d")
    return norms


def cos_sim(B: np.ndarray) -> float:
    """Eq. (5): (1 / n(n-1)) sum_{i != j} B_i B_j^T / (||B_i|| ||B_j||) over the rows of B (n, d)."""
    U = B / _row_norms(B)[:, None]
    n = len(B)
    s = U.sum(0)
    return float((s @ s - n) / (n * (n - 1)))   # sum over all pairs minus the n diagonal ones


def cos_bound(B: np.ndarray) -> float:
    """Eq. (6), the paper's upper bound on cos_sim(B) with b_min = min_i ||B_i||."""
    b_min = _row_norms(B).min()
    return float((np.linalg.norm(B, 2) ** 2 / b_min ** 2 - 1) / (len(B) - 1))


def token_similarity(alphas, betas, n: int = 196, d: int = 384, trials: int = 20,
                     dist: str = "gaussian", seed: int = 0) -> pd.DataFrame:
    """Theorem 2's setting: A (n, d) with i.i.d. zero-mean unit-variance entries, B = ReLU_{alpha,beta}(A).

    One row per (trial, alpha, beta); every (alpha, beta) sees the same draws of A, so before and
    after are paired. Columns: the similarity (5) and the bound (6) of A and B, and the terms of
    Theorem 2 for B: ||B||_op, min_i ||B_i||, the entries' mean mu_B and standard deviation sigma_B.
    """
    check_choice("dist", dist, DISTS)
    for what, v, low in (("n", n, 2), ("d", d, 1), ("trials", trials, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ValueError(f"{what} must be an int >= {low}, got {v!r}")
    if not len(alphas) or not len(betas):
        raise ValueError("alphas and betas must each hold at least one value")
    if any(b == 0 for b in betas):
        raise ValueError("beta = 0 maps every token to zero, where the cosine is undefined; use beta != 0")
    rng, rows = np.random.default_rng(seed), []
    for t in range(trials):
        A = DISTS[dist](rng, (n, d))
        cos_a, bound_a = cos_sim(A), cos_bound(A)
        for alpha in alphas:
            for beta in betas:
                B = scaled_relu(A, alpha, beta)
                rows.append(dict(dist=dist, n=n, d=d, trial=t, alpha=float(alpha), beta=float(beta),
                                 cos_A=cos_a, cos_B=cos_sim(B), bound_A=bound_a, bound_B=cos_bound(B),
                                 op_B=float(np.linalg.norm(B, 2)), min_row_B=float(np.linalg.norm(B, axis=1).min()),
                                 mu_B=float(B.mean()), sigma_B=float(B.std())))
    return pd.DataFrame(rows)


def _gaussian_relu_moments(alpha: float, k: int = 4) -> list[float]:
    """E[max(x + alpha, 0)^j], j = 0..k, x ~ N(0, 1), by integration by parts:
    I_j = alpha I_{j-1} + (j - 1) I_{j-2}, I_0 = Phi(alpha), I_1 = alpha Phi(alpha) + phi(alpha)."""
    I = [norm.cdf(alpha), alpha * norm.cdf(alpha) + norm.pdf(alpha)]
    for j in range(2, k + 1):
        I.append(alpha * I[j - 1] + (j - 1) * I[j - 2])
    return I


def gaussian_cos_sim(alpha: float, d: int | None = None) -> float:
    """E[cos_sim(ReLU_{alpha,beta}(A))] for N(0, 1) entries (any beta != 0: the cosine ignores scale).

    Two rows b, b' are independent with entry moments m1..m4, so as d -> inf their cosine tends to
    m1^2 / m2 (1/pi at alpha = 0). With ``d``, the delta method on b.b'/d, |b|^2/d, |b'|^2/d adds
    the O(1/d) term [3/4 m1^2 (m4 - m2^2) / m2^3 - (m1 m3 - m1^2 m2) / m2^2] / d; what is left is O(1/d^2).
    """
    _, m1, m2, m3, m4 = _gaussian_relu_moments(alpha)
    limit = m1 ** 2 / m2
    if d is None:
        return float(limit)
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be an int >= 1 or None, got {d!r}")
    bias = 0.75 * m1 ** 2 * (m4 - m2 ** 2) / m2 ** 3 - (m1 * m3 - m1 ** 2 * m2) / m2 ** 2
    return float(limit + bias / d)


# --- Theorem 1 -----------------------------------------------------------------------------------
def toy_problem(channels: int = 16, tokens: int = 512, outputs: int = 12, used: float = 0.5,
                noise: float = 0.1, seed: int = 0) -> dict:
    """Regression through the paper's frozen-everything-else model: X (tokens, channels) is the last
    conv's output after BN's standardisation (fixed: all earlier layers are frozen); the prediction
    is ReLU(beta * X + alpha) @ W (W = W_QKV, outputs = its 3 x head width). Targets come from a
    teacher of the same form in which only a share ``used`` of the channels is read (W_c = 0 else)."""
    for what, v in (("channels", channels), ("tokens", tokens), ("outputs", outputs)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{what} must be an int >= 1, got {v!r}")
    if not 0 < used <= 1:
        raise ValueError(f"used must be in (0, 1], got {used!r}")
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(tokens, channels, generator=g, dtype=torch.float64)
    X = (X - X.mean(0)) / X.std(0, unbiased=False)
    alpha = 0.5 * torch.randn(channels, generator=g, dtype=torch.float64)
    beta = 1 + 0.5 * torch.randn(channels, generator=g, dtype=torch.float64)
    keep = torch.rand(channels, generator=g, dtype=torch.float64) < used
    W = torch.randn(channels, outputs, generator=g, dtype=torch.float64) * keep[:, None]
    Y = torch.relu(X * beta + alpha) @ W + noise * torch.randn(tokens, outputs, generator=g, dtype=torch.float64)
    W0 = 0.02 * torch.randn(channels, outputs, generator=g, dtype=torch.float64)  # timm-like small init
    return dict(X=X, Y=Y, teacher_used=keep, W0=W0, seed=seed)


def _loss(p, alpha, beta, W):
    return ((torch.relu(p["X"] * beta + alpha) @ W - p["Y"]) ** 2).mean()


def _check_decay(weight_decay):
    if not isinstance(weight_decay, (int, float)) or isinstance(weight_decay, bool) or not weight_decay > 0:
        raise ValueError(f"weight_decay must be > 0 (the theorem is about the l2 penalty), got {weight_decay!r}")


def fit_l2(p: dict, weight_decay: float = 1e-2, decay_bn: bool = True, max_iter: int = 1000) -> dict:
    """min over (alpha, beta, W) of L + lam (|alpha|^2 + |beta|^2 + |W|_F^2), from BN's init
    (alpha = 0, beta = 1) and ``p["W0"]``, by full-batch L-BFGS in float64 (the theorem is about the
    minimiser, not a path to it). ``decay_bn=False`` drops alpha, beta from the penalty, as DeiT /
    timm do for every 1-D parameter. Returns the parameters, the loss, the objective and the
    largest |gradient| of the objective (about 0 at a stationary point)."""
    _check_decay(weight_decay)
    C = p["X"].shape[1]
    alpha = torch.zeros(C, dtype=torch.float64, requires_grad=True)
    beta = torch.ones(C, dtype=torch.float64, requires_grad=True)
    W = p["W0"].clone().requires_grad_()

    def objective():
        pen = (W ** 2).sum() + ((alpha ** 2).sum() + (beta ** 2).sum() if decay_bn else 0.0)
        return _loss(p, alpha, beta, W) + weight_decay * pen

    opt = torch.optim.LBFGS([alpha, beta, W], lr=1, max_iter=max_iter, history_size=50, tolerance_grad=1e-12,
                            tolerance_change=1e-16, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        J = objective()
        J.backward()
        return J
    opt.step(closure)
    J = closure()   # recomputes the gradient at the final point
    grad = max(t.grad.abs().max().item() for t in (alpha, beta, W))
    return dict(alpha=alpha.detach(), beta=beta.detach(), W=W.detach(), loss=_loss(p, alpha, beta, W).item(),
                objective=J.item(), grad=grad)


def balance(fit: dict) -> pd.DataFrame:
    """Per channel c: a_c = sqrt(alpha_c^2 + beta_c^2) and ||W_c||_2 (equal at a minimiser of the
    decayed problem: the loss is flat along (eta a, W / eta), the penalty eta^2 a^2 + |W|^2 / eta^2
    is stationary at eta = 1 only if a = |W|), the entrywise ||W_c||_1 and the paper's eq. (3) term."""
    a = torch.sqrt(fit["alpha"] ** 2 + fit["beta"] ** 2)
    w2, w1 = fit["W"].norm(dim=1), fit["W"].abs().sum(1)
    m = fit["W"].shape[1]
    return pd.DataFrame(dict(channel=range(len(a)), alpha=fit["alpha"].numpy(), beta=fit["beta"].numpy(),
                             scale_norm=a.numpy(), W_c_l2=w2.numpy(), W_c_l1=w1.numpy(),
                             l2_penalty=(a ** 2 + w2 ** 2).numpy(), group_penalty=(2 * a * w2).numpy(),
                             paper_eq3=(2 / math.sqrt(m) * a * w1).numpy()))


def fit_group_lasso(p: dict, weight_decay: float = 1e-2, steps: int = 5000, lr: float = 0.2) -> dict:
    """The problem Theorem 1 predicts, solved on its own: the function depends on channel c only
    through the direction (alpha_c, beta_c) / a_c = (cos t_c, sin t_c) and V_c = a_c W_c, so
    min over (t, V) of L + 2 lam sum_c ||V_c||_2 (a group lasso over input channels) by proximal
    gradient (group soft-thresholding of V after each gradient step), from BN's init t = pi/2."""
    _check_decay(weight_decay)
    if not isinstance(steps, int) or steps < 1 or not lr > 0:
        raise ValueError(f"steps must be an int >= 1 and lr > 0, got steps={steps!r}, lr={lr!r}")
    C = p["X"].shape[1]
    t = torch.full((C,), math.pi / 2, dtype=torch.float64, requires_grad=True)
    V = p["W0"].clone().requires_grad_()
    for _ in range(steps):
        L = _loss(p, torch.cos(t), torch.sin(t), V)
        t.grad = V.grad = None
        L.backward()
        with torch.no_grad():
            t -= lr * t.grad
            V -= lr * V.grad
            shrink = 1 - lr * 2 * weight_decay / V.norm(dim=1, keepdim=True).clamp_min(1e-300)
            V *= shrink.clamp_min(0)   # prox of lr * 2 lam ||V_c||: whole channels become exactly 0
    with torch.no_grad():
        L = _loss(p, torch.cos(t), torch.sin(t), V).item()
    return dict(t=t.detach(), V=V.detach(), loss=L, objective=L + 2 * weight_decay * V.norm(dim=1).sum().item())


def predict(p: dict, alpha, beta, W) -> torch.Tensor:
    """The toy's output ReLU(beta * X + alpha) @ W (tokens, outputs)."""
    return torch.relu(p["X"] * beta + alpha) @ W


def rescale_stem(model, eta, partner: str = "proj"):
    """A copy of a ViT with the VOLO conv stem where the last BN's (alpha_c, beta_c) are multiplied
    by eta_c > 0 and ``partner``'s weights reading channel c divided by eta_c: ``proj`` (the stem's
    patch projection, the first linear map after the last BN -> ReLU), ``qkv`` (the first block's
    W_QKV; it reads the 384-d token, not BN's channels, so eta must be one number there) or
    ``none``. The model's function is unchanged exactly when the pair is a rescaling symmetry."""
    check_choice("partner", partner, ("proj", "qkv", "none"))
    m = copy.deepcopy(model)
    bn = [x for x in m.patch_embed.layers if isinstance(x, torch.nn.BatchNorm2d)][-1]
    eta = torch.as_tensor(eta, dtype=bn.weight.dtype)
    if (eta <= 0).any():
        raise ValueError("eta must be > 0 (ReLU commutes with positive scales only)")
    if partner == "qkv" and eta.numel() != 1:
        raise ValueError("partner='qkv' needs one eta for all channels: W_QKV reads the token, not BN's channels")
    eta = eta.expand(bn.num_features)
    with torch.no_grad():
        bn.weight.mul_(eta)
        bn.bias.mul_(eta)
        if partner == "proj":
            m.patch_embed.proj.weight.div_(eta[None, :, None, None])   # (D, C, k, k): input channel c
        elif partner == "qkv":
            m.blocks[0].attn.qkv.weight.div_(eta[0])
    return m
