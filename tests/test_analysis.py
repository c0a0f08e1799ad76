"""Analysis numbers on matrices whose answer is known by construction."""
import pytest
import torch

from vitmlp.analysis import central_rows, locality, sparsity


def test_sparsity_counts_entries_below_five_percent_of_the_max():
    w = torch.tensor([[10.0, -0.4, 0.6], [0.49, -10.0, 5.0]])
    assert sparsity(w) == pytest.approx(2 / 6)            # 0.4 and 0.49 < 0.5; 0.6 is not
    assert sparsity(w, rel=0.7) == pytest.approx(4 / 6)   # everything but the two 10s
    assert sparsity(torch.ones(5)) == 0.0


def test_locality_of_identity_convolution_and_uniform_matrices():
    g = 6
    N = g * g
    eye = locality(torch.eye(N), g)
    assert eye["self"] == 1.0 and eye["near"] == 0.0 and eye["far"] == 0.0
    pos = torch.stack(torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij"), -1).view(-1, 2)
    conv = ((pos[:, None] - pos[None]).abs().amax(-1) <= 1).float()        # a 3x3 box filter
    c = locality(conv, g)
    assert c["self"] == pytest.approx(1 / 9) and c["near"] == pytest.approx(8 / 9) and c["far"] == 0.0
    u = locality(torch.ones(N, N), g)
    assert u["near"] == pytest.approx(u["near_uniform"]) == pytest.approx(8 / N)
    assert u["self"] + u["near"] + u["far"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"\(36, 36\)"):
        locality(torch.eye(10), g)


def test_central_rows_are_the_rows_of_the_central_patches():
    g = 4
    A = torch.arange(16 * 16, dtype=torch.float32).view(16, 16)
    rows = central_rows(A, g, 2)                      # patches (1,1) (1,2) (2,1) (2,2) = 5 6 9 10
    assert rows.shape == (2, 2, 4, 4)
    assert torch.equal(rows[0, 1].flatten(), A[6]) and torch.equal(rows[1, 0].flatten(), A[9])
    with pytest.raises(ValueError, match="k must be"):
        central_rows(A, g, 5)
