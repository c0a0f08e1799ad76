"""Three things Algorithm 1 (the hMLP stem as printed) computes the book's hmlp_bn / hmlp_ln stems."""
import pytest
import torch
import torch.nn as nn

from vitmlp.models.hmlp_algorithm1 import from_book, hMLP_stem
from vitmlp.models.stems import make_stem


def _randomized(kind, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    stem = make_stem(kind, img_size=64, patch_size=16, embed_dim=32).to(dtype)
    with torch.no_grad():
        for p in stem.parameters():  # no value of the initialisation can hide a swapped layer
            p.add_(0.1 * torch.randn_like(p))
        for m in stem.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
    return stem


@pytest.mark.parametrize("kind", ["hmlp_bn", "hmlp_ln"])
@pytest.mark.parametrize("train", [False, True])
def test_algorithm1_computes_the_book_stem(kind, train):
    stem = _randomized(kind).train(train)
    ref = from_book(stem)
    assert sum(isinstance(m, nn.SyncBatchNorm) for m in ref.modules()) == (3 if kind == "hmlp_bn" else 0)
    x = torch.randn(4, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        assert (stem(x) - ref(x)).abs().max() < 1e-12


def test_algorithm1_holds_its_own_weights():
    stem = _randomized("hmlp_bn").eval()
    ref = from_book(stem)
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        ref.proj[6].weight.mul_(2)
        assert not torch.allclose(stem(x), ref(x))


def test_listing_defaults_are_vit_b():
    ref = hMLP_stem()
    assert ref.num_patches == 196 and ref(torch.zeros(2, 3, 224, 224)).shape == (2, 196, 768)


@pytest.mark.parametrize("kind, patch", [("hmlp_bn", 8), ("levit_bn", 16), ("linear", 16)])
def test_algorithm1_refuses_what_it_does_not_describe(kind, patch):
    with pytest.raises(ValueError, match="Algorithm 1 describes"):
        from_book(make_stem(kind, img_size=64, patch_size=patch, embed_dim=32))
