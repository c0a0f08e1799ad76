"""Every registered model, at a tiny scale: it builds, maps a batch to one logit per class, and
every parameter receives a gradient (nothing built and left out of the forward pass)."""
from __future__ import annotations

import pytest
import torch

from vitmlp.models import create_model, list_models

TINY = dict(img_size=32, patch_size=8, width_mult=0.125, depth_mult=0.25, num_classes=7)


@pytest.mark.parametrize("name", list_models())
def test_every_model_trains_end_to_end_at_a_tiny_scale(name):
    torch.manual_seed(0)
    model = create_model(name, **TINY)
    with torch.no_grad():  # a zero-initialised head (Mixer's, as in the paper) passes no gradient back at init
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.normal_(0, 0.02)
    x = torch.randn(2, 3, 32, 32)
    out = model(x)
    assert out.shape == (2, 7)
    out.square().sum().backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.abs().sum())]
    assert not missing, f"{name}: parameters without gradient: {missing[:5]}"
