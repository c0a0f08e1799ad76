"""ResMLP (Touvron et al. 2021) and the variants of its Table 3, Table D.3 and Appendix A.

Built on timm's ``MlpMixer`` + ``ResBlock`` + ``Affine`` (timm/models/mlp_mixer.py), so parameter
names equal timm's ``resmlp_*`` models and timm's loader reads the official (deit) checkpoints.
Facts from deit's ``resmlp_models.py``: S = width 384, B = width 768; patch 16 (deit's B24 is /8);
LayerScale init 0.1 (depth 12), 1e-5 (S24), 1e-6 (S36 and B24); Linear weights trunc-normal(0.02).

    create_model("resmlp_S12")                                 # Table 1 / Table 3 baseline
    create_model("resmlp_S12", cross_patch="dsconv3x3")        # Table 3, patch communication
    create_model("resmlp_S24", pooling="class_mlp")            # Table D.3
    create_model("resmlp_S12", img_size=32, patch_size=4, width_mult=0.25)   # cpu profile
"""
from __future__ import annotations

import math
import re
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import Mlp, trunc_normal_
from timm.models.mlp_mixer import Affine, MlpMixer, ResBlock

from .registry import ACTS, check_choice, register, scale_depth, scale_width

WIDTHS = {"S": 384, "B": 768}
CROSS_PATCH = ["linear", "none", "mlp", "conv3x3", "dwconv3x3", "dsconv3x3"]


class TokenBatchNorm(nn.BatchNorm1d):
    """BatchNorm on tokens (B, N, d): statistics per channel over batch and patches (Appendix A)."""

    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class L2Norm(Affine):
    """Appendix A's "l2-norm" pre-normalisation: each token scaled to norm sqrt(d), then Aff.
    (The paper gives no detail; the sqrt(d) keeps the scale of LayerNorm's output.)"""

    def forward(self, x):
        return super().forward(F.normalize(x, dim=-1) * math.sqrt(x.shape[-1]))


NORMS = {"affine": Affine, "layernorm": partial(nn.LayerNorm, eps=1e-6),
         "batchnorm": TokenBatchNorm, "l2": L2Norm}


class PatchConv(nn.Module):
    """3x3 convolutions replacing the cross-patch linear layer (Table 3, patch communication)."""

    def __init__(self, dim: int, grid: tuple[int, int], kind: str):
        super().__init__()
        self.grid = grid
        if kind == "conv3x3":
            self.conv = nn.Conv2d(dim, dim, 3, padding=1)
        elif kind == "dwconv3x3":  # no mixing across channels, like the linear layer
            self.conv = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        else:  # depth-separable: depth-wise 3x3 then point-wise 1x1 (no activation between: unstated)
            self.conv = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1, groups=dim), nn.Conv2d(dim, dim, 1))

    def forward(self, x):  # x: (B, d, N) as ResBlock hands it over
        return self.conv(x.unflatten(2, self.grid)).flatten(2)


class ResMLPBlock(ResBlock):
    """Algorithm 1's block: x + ls1 * A(aff1(x)^T)^T, then x + ls2 * mlp(aff2(x)).
    ``cross_patch`` swaps the patch-communication layer A (Table 3; "mlp" is Appendix A's SA->MLP)."""

    def __init__(self, dim, seq_len, mlp_ratio=4, *, cross_patch="linear", patch_mlp_ratio=4.0,
                 grid=None, act_layer=nn.GELU, **kwargs):
        super().__init__(dim, seq_len, mlp_ratio, act_layer=act_layer, **kwargs)
        if cross_patch == "none":  # bag of patches: the whole first residual branch goes
            self.norm1 = self.linear_tokens = self.ls1 = None
        elif cross_patch == "mlp":  # (.)^T - linear N x eN - act - linear eN x N - (.)^T
            self.linear_tokens = Mlp(seq_len, int(patch_mlp_ratio * seq_len), act_layer=act_layer)
        elif cross_patch != "linear":
            self.linear_tokens = PatchConv(dim, grid, cross_patch)

    def forward(self, x):  # x: (B, N, d)
        if self.linear_tokens is not None:
            x = x + self.drop_path(self.ls1 * self.linear_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2))
        return x + self.drop_path(self.ls2 * self.mlp_channels(self.norm2(x)))


class ClassMLPBlock(nn.Module):
    """CaiT's class-attention layer with attention replaced by a linear layer over tokens (Section 2):
    only the class token is updated, from [class; frozen patches]."""

    def __init__(self, dim, seq_len, mlp_ratio, norm_layer, act_layer, init_values):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.linear_tokens = nn.Linear(seq_len + 1, 1)  # aggregates class + N patches
        self.norm2 = norm_layer(dim)
        self.mlp_channels = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer)
        self.ls1 = nn.Parameter(init_values * torch.ones(dim))
        self.ls2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, cls, x):  # cls: (B, 1, d), x: (B, N, d)
        u = self.norm1(torch.cat([cls, x], dim=1))  # (B, N+1, d)
        cls = cls + self.ls1 * self.linear_tokens(u.transpose(1, 2)).transpose(1, 2)
        return cls + self.ls2 * self.mlp_channels(self.norm2(cls))


class ClassMLP(nn.Module):
    """"class-MLP" pooling: a class token and two class-MLP layers (CaiT uses two class layers)."""

    def __init__(self, dim, seq_len, depth=2, **kwargs):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        trunc_normal_(self.cls_token, std=0.02)
        self.layers = nn.ModuleList([ClassMLPBlock(dim, seq_len, **kwargs) for _ in range(depth)])

    def forward(self, x):  # (B, N, d) -> (B, 1, d)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        for layer in self.layers:
            cls = layer(cls, x)
        return cls


class ResMLP(MlpMixer):
    """timm's MlpMixer plus the two options timm lacks: position embedding and class-MLP pooling."""

    def __init__(self, *, pos_embed=False, pooling="avg", init_values=1e-4, **kwargs):
        super().__init__(**kwargs)
        dim, n = self.embed_dim, self.stem.num_patches
        self.pos_embed = nn.Parameter(torch.zeros(1, n, dim)) if pos_embed else None
        self.pool = ClassMLP(dim, n, mlp_ratio=kwargs.get("mlp_ratio", 4), init_values=init_values,
                             norm_layer=kwargs["norm_layer"], act_layer=kwargs["act_layer"]) \
            if pooling == "class_mlp" else None
        self.apply(_init_deit)
        if self.pos_embed is not None:
            trunc_normal_(self.pos_embed, std=0.02)

    def forward_features(self, x):  # (B, 3, H, W) -> (B, N, d), or (B, 1, d) with class-MLP
        x = self.stem(x)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        x = self.blocks(x)
        if self.pool is not None:
            x = self.pool(x)  # forward_head's mean over one token is then the class token itself
        return self.norm(x)


def _init_deit(m):
    if isinstance(m, nn.Linear):  # deit: trunc-normal(0.02) weights, zero biases (convs keep timm's init)
        trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)


def default_init_values(size: str, depth: int) -> float:
    """LayerScale init of deit's ResMLP models (CaiT's rule by depth; deit's B24 uses 1e-6)."""
    if size == "B" or depth > 24:
        return 1e-6
    return 0.1 if depth <= 18 else 1e-5


@register("resmlp", examples=["S12", "S24", "S36", "B24"])
def build(spec: str, *, img_size: int = 224, patch_size: int = 16, in_chans: int = 3,
          num_classes: int = 1000, width_mult: float = 1.0, depth_mult: float = 1.0,
          init_values: float | None = None, norm: str = "affine", pooling: str = "avg",
          cross_patch: str = "linear", patch_mlp_ratio: float = 4.0, act: str = "gelu",
          mlp_ratio: float = 4.0, pos_embed: bool = False, drop_rate: float = 0.0,
          drop_path_rate: float = 0.0) -> ResMLP:
    """ResMLP-<S|B><depth>; ``init_values`` defaults to the paper's LayerScale init of the named
    (full-size) model, also when ``depth_mult`` shrinks it."""
    m = re.fullmatch(r"([A-Z])(\d+)", spec)
    if not m:
        raise ValueError(f"bad ResMLP spec {spec!r}; expected <size><depth>, e.g. S12, S24, S36, B24")
    size, depth = m.group(1), int(m.group(2))
    check_choice("ResMLP size", size, WIDTHS)
    for what, value, choices in [("norm", norm, NORMS), ("pooling", pooling, ["avg", "class_mlp"]),
                                 ("cross_patch", cross_patch, CROSS_PATCH), ("act", act, ACTS)]:
        check_choice(what, value, choices)
    if img_size % patch_size:
        raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
    if init_values is None:
        init_values = default_init_values(size, depth)
    grid = (img_size // patch_size,) * 2
    block = partial(ResMLPBlock, cross_patch=cross_patch, patch_mlp_ratio=patch_mlp_ratio, grid=grid,
                    init_values=init_values)
    return ResMLP(img_size=img_size, patch_size=patch_size, in_chans=in_chans, num_classes=num_classes,
                  embed_dim=scale_width(WIDTHS[size], width_mult, 16), num_blocks=scale_depth(depth, depth_mult),
                  mlp_ratio=mlp_ratio, block_layer=block, norm_layer=NORMS[norm], act_layer=ACTS[act],
                  drop_rate=drop_rate, drop_path_rate=drop_path_rate, pos_embed=pos_embed, pooling=pooling,
                  init_values=init_values)


def cross_patch_weights(model: nn.Module) -> list[torch.Tensor]:
    """The cross-patch matrix A (N, N) of every block; row i = weights of output patch i (Figure 2).
    Works for timm's ``resmlp_*`` models too."""
    blocks = list(model.blocks)
    if not all(isinstance(b.linear_tokens, nn.Linear) for b in blocks):
        raise ValueError("cross_patch_weights needs cross_patch='linear' (A is a matrix only then)")
    return [b.linear_tokens.weight.detach() for b in blocks]


def channel_mlp_weights(model: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The per-patch MLP matrices (B: (4d, d), C: (d, 4d)) of every block (Figure 3)."""
    return [(b.mlp_channels.fc1.weight.detach(), b.mlp_channels.fc2.weight.detach()) for b in model.blocks]
