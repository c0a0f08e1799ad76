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


def test_explicit_attention_computes_what_the_fused_kernel_does():
    from vitmlp.models.registry import fused_attention
    torch.manual_seed(0)
    model = create_model("vit_S", **TINY).eval()
    x = torch.randn(3, 3, 32, 32)
    fused = model(x)
    changed = fused_attention(model, False)
    assert len(changed) == len(model.blocks) == 3  # one attention per block of S12 x 1/4
    assert fused_attention(model, False) == []      # already off: nothing to change
    torch.testing.assert_close(model(x), fused, atol=1e-5, rtol=1e-4)
    assert len(fused_attention(model, True)) == 3
