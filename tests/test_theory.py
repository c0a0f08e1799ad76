"""Scaled ReLU's two theorems (vitmlp.theory): closed forms, the balance of Theorem 1, refusals."""
import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad
from scipy.stats import norm

from vitmlp import theory
from vitmlp.theory import (balance, cos_bound, cos_sim, fit_group_lasso, fit_l2, gaussian_cos_sim, rescale_stem,
                           token_similarity, toy_problem)


def test_cos_sim_is_eq5_and_cos_bound_is_eq6():
    B = np.random.default_rng(0).standard_normal((5, 7))
    U = B / np.linalg.norm(B, axis=1, keepdims=True)
    pairs = [U[i] @ U[j] for i in range(5) for j in range(5) if i != j]
    assert cos_sim(B) == pytest.approx(np.mean(pairs), abs=1e-12)
    b_min = np.linalg.norm(B, axis=1).min()
    assert cos_bound(B) == pytest.approx((np.linalg.svd(B, compute_uv=False)[0] ** 2 / b_min ** 2 - 1) / 4)
    assert cos_sim(np.ones((3, 4))) == pytest.approx(1.0)          # identical tokens


def test_gaussian_relu_moments_and_the_one_over_pi_limit():
    for alpha in (-1.3, 0.0, 0.7):
        for k, m in enumerate(theory._gaussian_relu_moments(alpha)):
            direct = quad(lambda x: (x + alpha) ** k * norm.pdf(x), -alpha, np.inf)[0]
            assert m == pytest.approx(direct, rel=1e-9)
    # x, y independent N(0, 1): E[relu(x) relu(y)] / E[relu(x)^2] = (1/(2 pi)) / (1/2)
    assert gaussian_cos_sim(0.0) == pytest.approx(1 / math.pi, abs=1e-15)
    limits = [gaussian_cos_sim(a) for a in (-2, -1, 0, 1, 2)]
    assert limits == sorted(limits) and 0 < limits[0] and limits[-1] < 1


def test_simulation_matches_the_closed_form_within_its_standard_error():
    n, d, trials = 64, 1024, 100
    df = token_similarity([-1.0, 0.0, 1.0], [1.0], n=n, d=d, trials=trials, seed=0)
    for alpha, g in df.groupby("alpha"):
        # the draws are independent, so their mean has standard error std / sqrt(trials); 4 of them
        # fail by chance with probability ~6e-5. gaussian_cos_sim keeps the O(1/d) term (2e-4 to 3e-4
        # here, a few standard errors); it drops an O(1/d^2) one, below 10 / d^2 in 1500-draw runs at d = 256.
        se = g.cos_B.std(ddof=1) / math.sqrt(trials)
        assert abs(g.cos_B.mean() - gaussian_cos_sim(alpha, d)) < 4 * se + 10 / d ** 2, alpha
    plain = df[df.alpha == 0.0]
    assert abs(plain.cos_A.mean()) < 0.01 and plain.cos_B.mean() > 0.3   # the ReLU raises similarity


def test_beta_changes_nothing_and_bound_6_holds_after_the_relu():
    df = token_similarity([-0.5, 0.5], [-1.0, 0.5, 1.0, 3.0], n=20, d=50, trials=3, dist="uniform")
    spread = df.groupby(["alpha", "trial"]).cos_B.agg(lambda s: s.max() - s.min())
    assert spread.max() < 1e-12
    assert (df.cos_B <= df.bound_B + 1e-12).all()


def test_bad_parameters_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="beta = 0"):
        token_similarity([0.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="valid choices: gaussian"):
        token_similarity([0.0], [1.0], dist="cauchy")
    with pytest.raises(ValueError, match="n must be an int >= 2"):
        token_similarity([0.0], [1.0], n=1)
    with pytest.raises(ValueError, match="trials must be"):
        token_similarity([0.0], [1.0], trials=0)
    with pytest.raises(ValueError, match="tokens are all zero"):     # max(+-1 - 1, 0) = 0 everywhere
        token_similarity([-1.0], [1.0], n=4, d=8, trials=1, dist="rademacher")
    with pytest.raises(ValueError, match="d must be"):
        gaussian_cos_sim(0.0, d=0)
    with pytest.raises(ValueError, match="weight_decay must be > 0"):
        fit_l2(toy_problem(channels=2, tokens=8, outputs=2), weight_decay=0.0)
    with pytest.raises(ValueError, match="weight_decay must be > 0"):
        fit_group_lasso(toy_problem(channels=2, tokens=8, outputs=2), weight_decay=-1e-2)
    with pytest.raises(ValueError, match="channels must be"):
        toy_problem(channels=0)


def test_theorem1_balance_and_group_penalty_on_the_toy():
    torch.set_num_threads(1)
    p = toy_problem(channels=8, tokens=256, outputs=6, seed=0)
    fit = fit_l2(p, weight_decay=1e-2)
    b = balance(fit)
    live = b.scale_norm > 1e-3 * b.scale_norm.max()
    assert 0 < live.sum() < len(b)                                   # some channels switched off
    gap = ((b.scale_norm - b.W_c_l2).abs() / b.scale_norm)[live]
    assert gap.max() < 1e-3                                          # sqrt(alpha^2 + beta^2) = ||W_c||_2
    assert b.group_penalty.sum() == pytest.approx(b.l2_penalty.sum(), rel=1e-6)
    assert (b.paper_eq3 <= b.group_penalty + 1e-12).all()           # eq. (3) is a lower bound
    gl = fit_group_lasso(p, weight_decay=1e-2, steps=3000)
    assert gl["objective"] == pytest.approx(fit["objective"], rel=1e-6)
    # without decay on alpha, beta (DeiT / timm) the rescaling is free: the scales run away
    recipe = balance(fit_l2(p, weight_decay=1e-2, decay_bn=False))
    assert (recipe.scale_norm / recipe.W_c_l2).median() > 100


def test_rescaling_bn_with_the_patch_projection_is_a_symmetry_of_the_vit():
    from vitmlp.models import create_model
    torch.manual_seed(0)
    vit = create_model("vit_S", stem="volo", img_size=16, patch_size=4, width_mult=0.125, depth_mult=0.25).eval()
    x = torch.randn(2, 3, 16, 16)
    eta = torch.exp(torch.randn(vit.patch_embed.proj.in_channels))
    with torch.no_grad():
        y = vit(x)
        change = {k: (rescale_stem(vit, e, k)(x) - y).abs().max().item() / y.abs().max().item()
                  for k, e in (("proj", eta), ("none", eta), ("qkv", 2.0))}
    assert change["proj"] < 1e-5 and change["none"] > 1e-3 and change["qkv"] > 1e-3
    with pytest.raises(ValueError, match="eta must be > 0"):
        rescale_stem(vit, -eta)
    with pytest.raises(ValueError, match="one eta"):
        rescale_stem(vit, eta, "qkv")
    with pytest.raises(ValueError, match="valid choices: proj"):
        rescale_stem(vit, eta, "fc1")
