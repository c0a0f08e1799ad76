"""Patch stems of "Three things" (Table 7, Algorithm 1), Scaled ReLU (conv stem) and Dual PatchNorm.

Every stem maps an image (B, C, H, W) to tokens (B, N, D), N = (H/p)(W/p), and is passed to
timm's ``VisionTransformer`` as ``embed_layer``. In every stem ``.proj`` is the patch projection
(the last conv/dense layer); in the DPN stem ``.pixel_norm`` is the LayerNorm on raw pixels.

| stem              | layers (patch p=16, width D)                                   | source             |
|-------------------|----------------------------------------------------------------|--------------------|
| linear            | conv p/p (timm PatchEmbed)                                     | ViT                |
| linear_bn/_gelu/_bn_gelu | conv p/p -> [BN] -> [GELU]                              | Three things T7    |
| levit_bn, levit_ln| (conv3x3/2 -> norm -> GELU) x3 -> conv3x3/2 -> norm; D/8..D ch  | LeViT (Graham+21)  |
| hmlp_bn, hmlp_ln  | conv4/4 -> norm -> GELU -> conv2/2 -> norm -> GELU -> conv2/2 -> norm | Three things Alg 1 |
| volo              | conv7/2 -> BN -> ReLU -> (conv3/1 -> BN -> ReLU)x2 -> conv8/8, 64 ch | Scaled ReLU (VOLO) |
| dpn               | patches -> LN -> dense -> LN                                    | Dual PatchNorm     |
"""
from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn as nn
from einops import rearrange
from timm.layers import LayerNorm, LayerNorm2d, PatchEmbed, RmsNorm, to_2tuple

from ..choices import check_int
from .registry import ACTS, check_choice

STEMS = ("linear", "linear_bn", "linear_gelu", "linear_bn_gelu", "levit_bn", "levit_ln",
         "hmlp_bn", "hmlp_ln", "volo", "dpn")
DPN_VARIANTS = ("dual", "pre", "post", "post_posemb", "only_learnable", "rmsnorm", "no_learnable")
# Dual PatchNorm Table 4 rows: paper label -> ``dpn_variant`` (the full DPN is "dual")
DPN_TABLE4 = {"Pre": "pre", "Post": "post", "Post PosEmb": "post_posemb", "Only learnable": "only_learnable",
              "RMSNorm": "rmsnorm", "No learnable": "no_learnable"}
NORMS_2D = {"bn": nn.BatchNorm2d, "ln": LayerNorm2d}  # LayerNorm2d: LN over channels of (B, C, H, W)

# Scaled ReLU Table 2 rows (DeiT-S): paper label -> options of the ``volo`` stem.
SCALED_RELU_STEMS = {
    "3Conv+3BN+3ReLU+1Proj": dict(stem="volo"),
    "3Conv+3BN+1Proj": dict(stem="volo", stem_act="none"),
    "3Conv+3ReLU+1Proj": dict(stem="volo", stem_bn=False),
    "3Conv+1Proj": dict(stem="volo", stem_bn=False, stem_act="none"),
    "3Conv+1Proj+1ReLU": dict(stem="volo", stem_bn=False, stem_act="none", stem_proj_act="relu"),
    "1Proj+1BN+1ReLU": dict(stem="volo", stem_convs=0, stem_proj_bn=True, stem_proj_act="relu"),
    "1Proj+1ReLU": dict(stem="volo", stem_convs=0, stem_proj_act="relu"),
    "1Proj": {},   # the patchify stem: no option, so its runs are the profile's own ViT-S runs
}


class TokenStem(nn.Module):
    """Geometry shared by the stems (the attributes timm's VisionTransformer reads)."""

    def __init__(self, img_size, patch_size):
        super().__init__()
        self.patch_size = to_2tuple(patch_size)
        self.set_input_size(img_size)

    def set_input_size(self, img_size=None, patch_size=None):
        if patch_size is not None and to_2tuple(patch_size) != self.patch_size:
            raise ValueError("this stem cannot change its patch size after construction")
        if img_size is not None:
            self.img_size = to_2tuple(img_size)
            self.grid_size = tuple(s // p for s, p in zip(self.img_size, self.patch_size))
            self.num_patches = self.grid_size[0] * self.grid_size[1]

    def feat_ratio(self, as_scalar=True):
        return self.patch_size[0] if as_scalar else self.patch_size

    def dynamic_feat_size(self, img_size):
        return img_size[0] // self.patch_size[0], img_size[1] // self.patch_size[1]


class ConvStem(TokenStem):
    """``layers`` -> ``proj`` (the patch projection) -> ``post`` (norm / activation), then flatten."""

    def __init__(self, img_size, patch_size, layers, proj, post=()):
        super().__init__(img_size, patch_size)
        self.layers, self.proj, self.post = nn.Sequential(*layers), proj, nn.Sequential(*post)

    def forward(self, x):  # (B, C, H, W)
        x = self.post(self.proj(self.layers(x)))  # (B, D, H/p, W/p)
        return x.flatten(2).transpose(1, 2)  # (B, N, D)


class ScaleShift(nn.Module):
    """gamma * x + beta without standardisation (DPN Table 4 "only learnable")."""

    def __init__(self, dim):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return x * self.weight + self.bias


def _dpn_norm(variant, dim):
    return {"only_learnable": ScaleShift, "rmsnorm": RmsNorm,
            "no_learnable": partial(LayerNorm, affine=False)}.get(variant, LayerNorm)(dim)


class DualPatchNorm(TokenStem):
    """Dual PatchNorm: LN(dense(LN(patches))) on raw pixel patches (the paper's listing)."""

    def __init__(self, img_size, patch_size, in_chans, embed_dim, variant="dual", bias=True):
        super().__init__(img_size, patch_size)
        dim = self.patch_size[0] * self.patch_size[1] * in_chans
        pre = variant not in ("post", "post_posemb")  # post_posemb: the LN comes after the pos-embed
        post = variant not in ("pre", "post_posemb")
        self.pixel_norm = _dpn_norm(variant, dim) if pre else nn.Identity()
        self.proj = nn.Linear(dim, embed_dim, bias=bias)
        self.norm = _dpn_norm(variant, embed_dim) if post else nn.Identity()

    def forward(self, x):  # (B, C, H, W)
        p1, p2 = self.patch_size
        x = rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=p1, p2=p2)  # (B, N, p*p*C)
        return self.norm(self.proj(self.pixel_norm(x)))  # (B, N, D)


def volo_geometry(patch: int, strides) -> tuple[tuple, tuple]:
    """Kernels and paddings of the VOLO conv stem for ``strides`` (Scaled ReLU Table 3 keeps the
    kernels (7, 3, 3, p/2) and adapts the paddings; (2,1,1,8): proj 8/8, (2,2,2,2): proj k8 s2 p3)."""
    k4 = max(patch // 2, strides[3])
    k4 += (k4 - strides[3]) % 2  # an odd k-s cannot keep the grid: widen by one (reduced patches)
    return (7, 3, 3, k4), (3, 1, 1, (k4 - strides[3]) // 2)


def volo_strides(patch: int) -> list[tuple]:
    """The two stride patterns of Scaled ReLU Table 3, for a patch size: (2,1,1,p/2), then
    stride 2 spread evenly ((2,2,2,2) at p=16, (2,2,1,1) at p=4)."""
    n = min(int(math.log2(patch)), 3)
    even = [2] * n + [1] * (3 - n)
    return [(2, 1, 1, patch // 2), (*even, patch // 2 ** n)]


def _conv(cin, cout, k, s, p=0, bias=True):
    return nn.Conv2d(cin, cout, k, stride=s, padding=p, bias=bias)


def make_stem(kind, *, img_size, patch_size, in_chans=3, embed_dim=768, bias=True,
              dpn_variant="dual", stem_convs=3, stem_bn=True, stem_act="relu", stem_proj_bn=False,
              stem_proj_act="none", stem_strides=None, stem_width=64, **_timm_kwargs):
    """Build stem ``kind`` (one of STEMS); keyword names match timm's ``embed_layer`` call."""
    p, D = to_2tuple(patch_size)[0], embed_dim
    check_stem_options(kind, p, dpn_variant=dpn_variant, stem_convs=stem_convs, stem_bn=stem_bn,
                       stem_act=stem_act, stem_proj_bn=stem_proj_bn, stem_proj_act=stem_proj_act,
                       stem_strides=stem_strides, stem_width=stem_width)
    if kind == "linear":
        return PatchEmbed(img_size, patch_size, in_chans, embed_dim, bias=bias)
    if kind == "dpn":
        return DualPatchNorm(img_size, patch_size, in_chans, embed_dim, dpn_variant, bias=bias)
    if kind.startswith("linear_"):  # Table 7: linear projection followed by BN and/or GELU
        post = [nn.BatchNorm2d(D)] if "bn" in kind else []
        post += [nn.GELU()] if "gelu" in kind else []
        return ConvStem(img_size, p, [], _conv(in_chans, D, p, p, bias=bias), post)
    if kind.startswith("levit"):  # log2(p) conv3x3/2; widths D/8, D/4, D/2, D at p=16
        norm, n = NORMS_2D[kind[-2:]], int(math.log2(p))
        if 2 ** n != p:
            raise ValueError(f"the LeViT stem needs a power-of-two patch size, got {p}")
        chs = [in_chans] + [D // 2 ** (n - 1 - i) for i in range(n)]
        layers = []
        for i in range(n - 1):
            layers += [_conv(chs[i], chs[i + 1], 3, 2, 1, bias=False), norm(chs[i + 1]), nn.GELU()]
        return ConvStem(img_size, p, layers, _conv(chs[-2], D, 3, 2, 1, bias=False), [norm(D)])
    if kind.startswith("hmlp"):  # Algorithm 1: sub-patches p/4 -> p/2 -> p, never across patches
        norm = NORMS_2D[kind[-2:]]
        if p % 4:
            raise ValueError(f"the hMLP stem needs a patch size divisible by 4, got {p}")
        layers = [_conv(in_chans, D // 4, p // 4, p // 4), norm(D // 4), nn.GELU(),
                  _conv(D // 4, D // 4, 2, 2), norm(D // 4), nn.GELU()]
        return ConvStem(img_size, p, layers, _conv(D // 4, D, 2, 2), [norm(D)])
    # volo: Scaled ReLU's conv stem, every component switchable (Tables 2, 3, 5)
    post = ([nn.BatchNorm2d(D)] if stem_proj_bn else []) + [ACTS[stem_proj_act]()]
    if stem_convs == 0:  # "1Proj (16)": the patchify projection, optionally + BN / ReLU
        return ConvStem(img_size, p, [], _conv(in_chans, D, p, p, bias=bias), post)
    strides = tuple(stem_strides or volo_strides(p)[0])
    kernels, pads = volo_geometry(p, strides)
    chs, layers = [in_chans, stem_width, stem_width, stem_width], []
    for i in range(3):
        layers.append(_conv(chs[i], chs[i + 1], kernels[i], strides[i], pads[i], bias=False))
        layers += [nn.BatchNorm2d(stem_width)] if stem_bn else []
        layers.append(ACTS[stem_act]())
    proj = _conv(stem_width, D, kernels[3], strides[3], pads[3], bias=bias)
    return ConvStem(img_size, p, layers, proj, post)


def check_stem_options(kind, patch_size, *, dpn_variant="dual", stem_convs=3, stem_bn=True,
                       stem_act="relu", stem_proj_bn=False, stem_proj_act="none", stem_strides=None, stem_width=64):
    """Refuse any invalid stem option, whichever stem is chosen, listing the valid choices."""
    check_choice("stem", kind, STEMS)
    check_choice("dpn_variant", dpn_variant, DPN_VARIANTS)
    check_choice("stem_convs", stem_convs, (3, 0))
    check_choice("stem_bn", stem_bn, (True, False))
    check_choice("stem_act", stem_act, tuple(ACTS))
    check_choice("stem_proj_bn", stem_proj_bn, (True, False))
    check_choice("stem_proj_act", stem_proj_act, tuple(ACTS))
    check_int("stem_width", stem_width)
    if stem_strides is not None:
        check_choice(f"stem_strides for patch {patch_size}", tuple(stem_strides), volo_strides(patch_size))


def describe(stem: nn.Module) -> str:
    """A built stem's layers in the order they run: ``conv 4×4/4 3→192 → BN → GELU → ...`` (kernel/stride,
    channels in→out; ``dense`` for a linear layer on flattened patches)."""
    names = ((nn.BatchNorm2d, "BN"), (nn.LayerNorm, "LN"), (nn.GELU, "GELU"), (nn.ReLU, "ReLU"))  # LN: timm's too
    out = []
    for m in stem.modules():
        if isinstance(m, nn.Conv2d):
            (k, _), (s, _) = m.kernel_size, m.stride
            out.append(f"conv {k}×{k}/{s} {m.in_channels}→{m.out_channels}")
        elif isinstance(m, nn.Linear):
            out.append(f"dense {m.in_features}→{m.out_features}")
        else:
            out += [name for cls, name in names if isinstance(m, cls)]
    return " → ".join(out)


def stem_layer(kind, patch_size, **options):
    """``embed_layer`` for timm's VisionTransformer: validates now, builds when timm calls it."""
    check_stem_options(kind, patch_size, **options)
    return partial(make_stem, kind, **options)
