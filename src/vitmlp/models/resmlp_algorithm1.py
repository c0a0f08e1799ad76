"""Algorithm 1 of the ResMLP paper (Appendix C), transcribed, and a loader of the book's weights.

The classes keep the paper's names and forward passes line by line, so a reader can hold the
listing and this file side by side. The listing leaves ``Patch_projector`` undefined; the text
says "the patches are independently passed through a linear layer", so it is written here as
exactly that: cut the image into p x p patches, flatten each, apply one ``nn.Linear``. The book's
model (timm's convolution stem) must agree with it.

    ref = from_book(create_model("resmlp_S12"))   # same weights, Algorithm 1's code
    (ref(x) - book(x)).abs().max()                 # ~1e-6 in float32
"""
from __future__ import annotations

import re

import torch
import torch.nn as nn
import torch.nn.functional as F


class Affine(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return self.alpha * x + self.beta


class Mlp(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.fc2(x)
        return x


class ResMLP_BLocks(nn.Module):  # the paper's spelling
    """A linear between patches + a MLP to process them independently."""

    def __init__(self, nb_patches, dim, layerscale_init):
        super().__init__()
        self.affine_1 = Affine(dim)
        self.affine_2 = Affine(dim)
        self.linear_patches = nn.Linear(nb_patches, nb_patches)  # linear layer on patches
        self.mlp_channels = Mlp(dim)  # MLP on channels
        self.layerscale_1 = nn.Parameter(layerscale_init * torch.ones((dim)))  # LayerScale
        self.layerscale_2 = nn.Parameter(layerscale_init * torch.ones((dim)))  # parameters

    def forward(self, x):  # x: (B, N, d)
        res_1 = self.linear_patches(self.affine_1(x).transpose(1, 2)).transpose(1, 2)
        x = x + self.layerscale_1 * res_1
        res_2 = self.mlp_channels(self.affine_2(x))
        x = x + self.layerscale_2 * res_2
        return x


class Patch_projector(nn.Module):
    """Not defined in the listing: one linear layer applied to every flattened p x p patch."""

    def __init__(self, patch_size, dim, in_chans=3):
        super().__init__()
        self.patch_size = patch_size
        self.linear = nn.Linear(in_chans * patch_size * patch_size, dim)

    def forward(self, x):  # (B, C, H, W) -> (B, N, C*p*p) -> (B, N, d), patches in row-major order
        patches = F.unfold(x, self.patch_size, stride=self.patch_size).transpose(1, 2)
        return self.linear(patches)


class ResMLP_models(nn.Module):
    """Stacking the full network."""

    def __init__(self, dim, depth, nb_patches, layerscale_init, num_classes, patch_size=16, in_chans=3):
        super().__init__()
        self.patch_projector = Patch_projector(patch_size, dim, in_chans)
        self.blocks = nn.ModuleList([
            ResMLP_BLocks(nb_patches, dim, layerscale_init)
            for i in range(depth)])
        self.affine = Affine(dim)
        self.linear_classifier = nn.Linear(dim, num_classes)

    def forward(self, x):
        B, C, H, W = x.shape
        x = self.patch_projector(x)
        for blk in self.blocks:
            x = blk(x)
        x = self.affine(x)
        x = x.mean(dim=1).reshape(B, -1)  # average pooling
        return self.linear_classifier(x)


# The book's parameter names (timm's ResMLP) -> Algorithm 1's names. Every parameter of the book's
# model must match exactly one rule and fill exactly one parameter of Algorithm 1's model.
NAME_MAP = [
    (r"^stem\.proj\.", "patch_projector.linear."),
    (r"^blocks\.(\d+)\.norm1\.", r"blocks.\1.affine_1."),
    (r"^blocks\.(\d+)\.norm2\.", r"blocks.\1.affine_2."),
    (r"^blocks\.(\d+)\.linear_tokens\.", r"blocks.\1.linear_patches."),
    (r"^blocks\.(\d+)\.mlp_channels\.(fc[12])\.", r"blocks.\1.mlp_channels.\2."),
    (r"^blocks\.(\d+)\.ls1$", r"blocks.\1.layerscale_1"),
    (r"^blocks\.(\d+)\.ls2$", r"blocks.\1.layerscale_2"),
    (r"^norm\.", "affine."),
    (r"^head\.", "linear_classifier."),
]


def algorithm1_name(book_name: str) -> str:
    for pattern, repl in NAME_MAP:
        if re.search(pattern, book_name):
            return re.sub(pattern, repl, book_name)
    raise ValueError(f"parameter {book_name!r} has no counterpart in Algorithm 1 (a variant the "
                     "listing does not describe: class-MLP, position embedding, other norm / cross-patch layer?)")


@torch.no_grad()
def from_book(model: nn.Module) -> ResMLP_models:
    """Algorithm 1's model carrying the weights of the book's ``resmlp_*`` (or timm's) model."""
    dim, depth = model.embed_dim, len(model.blocks)
    (p, _), in_chans = model.stem.patch_size, model.stem.proj.in_channels
    blk = model.blocks[0]
    parts = (blk.norm1, blk.linear_tokens, blk.mlp_channels.act)
    if [type(m).__name__ for m in parts] != ["Affine", "Linear", "GELU"]:
        raise ValueError("Algorithm 1 describes the default ResMLP only (Aff pre-normalisation, a linear "
                         "cross-patch layer, GELU); this model has " + ", ".join(type(m).__name__ for m in parts))
    if blk.mlp_channels.fc1.out_features != 4 * dim:
        raise ValueError("Algorithm 1's Mlp has a fixed hidden width 4*dim; this model uses another mlp_ratio")
    ref = ResMLP_models(dim, depth, model.stem.num_patches, 0.0, model.head.out_features, p, in_chans)
    ref = ref.to(next(model.parameters()).dtype)  # before loading: a float64 copy must not pass through float32
    state = {}
    for name, value in model.state_dict().items():
        if name == "stem.proj.weight":  # conv (d, C, p, p) == linear (d, C*p*p): unfold's order is (C, p, p)
            value = value.reshape(dim, -1)
        elif name.endswith((".alpha", ".beta")):  # timm keeps Aff's vectors as (1, 1, d), the listing as (d,)
            value = value.reshape(dim)
        state[algorithm1_name(name)] = value
    ref.load_state_dict(state, strict=True)  # fails if a parameter of Algorithm 1 stays unfilled
    return ref.eval()
