"""ViT family of "Three things", Scaled ReLU and Dual PatchNorm, on timm's VisionTransformer.

Names (Three things, Sec. 3.3): ``vit_<width><depth>x<branches>``, e.g. ``vit_S24x2`` = ViT-S with
24 layers of 2 parallel blocks (48 MHSA+FFN pairs), ``vit_B13`` = ViT-B with 13 blocks.
Widths: Ti 192/3 heads, S 384/6, B 768/12, L 1024/16; default depth 12 (L: 24); patch 16; the
class token is pooled (the papers' ViT).

    create_model("vit_B", stem="hmlp_bn")                  # Three things Table 7
    create_model("vit_S", stem="volo", stem_act="none")    # Scaled ReLU Table 2, 3Conv+3BN+1Proj
    create_model("vit_B", stem="dpn", block_norm="normformer")  # Dual PatchNorm Fig. 1 / Table 4

Where the analyses find things: attention parameters have ``.attn.`` in their name, FFN
parameters ``.mlp.``; ``model.patch_embed.proj`` is the patch projection of every stem and
``model.patch_embed.pixel_norm`` the first LayerNorm of Dual PatchNorm (see ``parameter_groups``).
``trainable(model, mode)`` gives ``TrainConfig.trainable`` for fine-tuning full / attn / ffn (Three things Sec. 4).
"""
from __future__ import annotations

import math
import re
from functools import partial

import torch
import torch.nn as nn
from timm.layers import Mlp
from timm.models.vision_transformer import Block, ParallelThingsBlock, VisionTransformer

from .parallel import ParallelBlock
from .registry import check_choice, register, scale_depth, scale_width
from .stems import ACTS, stem_layer

WIDTHS = {"Ti": (192, 3), "S": (384, 6), "B": (768, 12), "L": (1024, 16)}  # width, heads
DEPTHS = {"Ti": 12, "S": 12, "B": 12, "L": 24}
SPEC = re.compile(r"(Ti|S|B|L)(\d+)?(?:x(\d+))?")
PLACEMENTS = ("pre", "post", "prepost")
BLOCK_NORMS = tuple(f"{a}/{m}" for a in PLACEMENTS for m in PLACEMENTS) + ("normformer", "subln")


class PlacementBlock(Block):
    """timm's Block with the LayerNorm placements of Dual PatchNorm Fig. 1, per sublayer f:
    pre: x + f(LN(x)) (ViT);  post: LN(x + f(x)) (original Transformer, as in Xiong et al. 2020);
    prepost: LN(x + f(LN(x))).  ``attn_out_norm`` adds NormFormer's LN on the attention output."""

    def __init__(self, dim, *, attn_norm="pre", mlp_norm="pre", attn_out_norm=False, **kwargs):
        super().__init__(dim, **kwargs)
        norm = partial(kwargs["norm_layer"], dim)
        self.norm1 = norm() if "pre" in attn_norm else nn.Identity()
        self.norm1_post = norm() if "post" in attn_norm else nn.Identity()
        self.norm2 = norm() if "pre" in mlp_norm else nn.Identity()
        self.norm2_post = norm() if "post" in mlp_norm else nn.Identity()
        self.attn_out_norm = norm() if attn_out_norm else nn.Identity()

    def forward(self, x, attn_mask=None, is_causal=False):  # (B, N, D) -> (B, N, D)
        a = self.attn_out_norm(self.attn(self.norm1(x), attn_mask=attn_mask, is_causal=is_causal))
        x = self.norm1_post(x + self.drop_path1(self.ls1(a)))
        return self.norm2_post(x + self.drop_path2(self.ls2(self.mlp(self.norm2(x)))))


class BnMlp(Mlp):
    """Scaled ReLU Table 5 "MLP -> Conv1D+BN+GELU": fc1 -> BatchNorm1d -> act -> fc2. A Conv1D with
    kernel 1 is a dense layer, so fc1/fc2 stay nn.Linear ("MLP -> Conv1D+GELU" is the plain MLP).
    The paper's Algorithm 2 is not in our copy; BN sits where the text puts it, after fc1 only."""

    def __init__(self, in_features, hidden_features=None, **kwargs):
        super().__init__(in_features, hidden_features, **kwargs)
        self.bn = nn.BatchNorm1d(hidden_features or in_features)

    def forward(self, x):  # (B, N, D)
        x = self.fc1(x)  # (B, N, H)
        x = self.bn(x.transpose(1, 2)).transpose(1, 2)  # BN over the hidden channels
        x = self.norm(self.drop1(self.act(x)))
        return self.drop2(self.fc2(x))  # (B, N, D)


def _subln_init(model: VisionTransformer) -> None:
    # Sub-LN (Wang et al. 2022, "Foundation Transformers") comes with its init: for an encoder of
    # N layers, scale the value, attention-output and FFN weights by sqrt(log 2N).
    gamma = math.sqrt(math.log(2 * len(model.blocks)))
    with torch.no_grad():
        for blk in model.blocks:
            d = blk.attn.proj.in_features
            blk.attn.qkv.weight[2 * d:].mul_(gamma)  # rows of v in the fused qkv
            for lin in (blk.attn.proj, blk.mlp.fc1, blk.mlp.fc2):
                lin.weight.mul_(gamma)


def _block(block_norm: str, branches: int):
    """(block class, extra VisionTransformer kwargs) of a LayerNorm placement or of parallel branches."""
    if branches > 1:
        return partial(ParallelBlock, num_parallel=branches), {}  # timm's block + concurrent option
    if block_norm == "normformer":  # LN after the attention output and after the FFN activation
        return partial(PlacementBlock, attn_out_norm=True), dict(scale_mlp_norm=True)
    if block_norm == "subln":  # LN before the output projection of attention and of the FFN
        return Block, dict(scale_attn_norm=True, scale_mlp_norm=True)
    if block_norm != "pre/pre":
        attn_norm, mlp_norm = block_norm.split("/")
        return partial(PlacementBlock, attn_norm=attn_norm, mlp_norm=mlp_norm), {}
    return Block, {}


def _with_drop_path(block_fn, rate: float, **kwargs):
    """``block_fn`` with drop-path ``rate``, whatever timm's linear rule gives this block."""
    return block_fn(**{**kwargs, "drop_path": rate})


def _drop_ffn_norm(model: VisionTransformer) -> None:
    for blk in model.blocks:
        if isinstance(blk, ParallelThingsBlock):
            for ffn in blk.ffns:
                ffn.norm = nn.Identity()
        else:
            blk.norm2 = nn.Identity()


@register("vit", examples=["Ti", "S", "B", "L", "S48x1", "S24x2", "B12x1", "B36x1", "B18x2",
                           "L24x1", "B13", "S18x2"])
def build(spec: str, *, patch_size: int = 16, img_size: int = 224, num_classes: int = 1000,
          in_chans: int = 3, layerscale: float | None = None, drop_path: float = 0.0,
          width_mult: float = 1.0, depth_mult: float = 1.0, pool: str = "cls", drop_path_schedule: str = "linear",
          stem: str = "linear", dpn_variant: str = "dual", stem_convs: int = 3,
          stem_bn: bool = True, stem_act: str = "relu", stem_proj_bn: bool = False,
          stem_proj_act: str = "none", stem_strides: tuple | None = None, stem_width: int = 64,
          block_norm: str = "pre/pre", ffn_act: str = "gelu", ffn_norm: bool = True,
          ffn_bn: bool = False) -> VisionTransformer:
    """Build ``vit_<spec>``. ``layerscale``: LayerScale init value (None: off). ``depth_mult``
    scales the layers per branch, so S48x1 and S24x2 keep equal totals whenever 24*depth_mult is
    whole (e.g. 1/2, 1/4, 1/6, 1/8, 1/12). Stem options: see ``stems.make_stem``. FFN options
    (Scaled ReLU Table 5): ``ffn_act`` relu/gelu, ``ffn_norm=False`` drops the LayerNorm before the
    FFN, ``ffn_bn=True`` puts BatchNorm after fc1. ``drop_path_schedule``: "linear" (timm: 0 at the
    first block up to ``drop_path`` at the last) or "constant" (``drop_path`` in every block, as in
    deit's models_v2.py, the Three things code)."""
    m = SPEC.fullmatch(spec)
    if not m:
        raise ValueError(f"bad ViT spec {spec!r}: expected (Ti|S|B|L)(<depth>)?(x<branches>)?, "
                         f"e.g. S, B13, S24x2")
    size, depth, branches = m[1], int(m[2] or DEPTHS[m[1]]), int(m[3] or 1)
    check_choice("pool", pool, ("cls", "avg"))
    check_choice("block_norm", block_norm, BLOCK_NORMS)
    check_choice("ffn_act", ffn_act, ("gelu", "relu"))
    check_choice("ffn_norm", ffn_norm, (True, False))
    check_choice("ffn_bn", ffn_bn, (True, False))
    check_choice("drop_path_schedule", drop_path_schedule, ("linear", "constant"))
    if branches < 1 or depth < 1:
        raise ValueError(f"bad ViT spec {spec!r}: depth and branches must be >= 1")
    if branches > 1 and block_norm != "pre/pre":
        raise ValueError(f"block_norm={block_norm!r} is defined for sequential blocks only; "
                         f"valid choices with {branches} branches: pre/pre")

    width, heads = WIDTHS[size]
    width = scale_width(width, width_mult, heads) if width_mult != 1 else width
    depth = scale_depth(depth, depth_mult) if depth_mult != 1 else depth

    block_fn, extra = _block(block_norm, branches)
    if drop_path_schedule == "constant":  # every block gets the rate timm would spread linearly
        block_fn = partial(_with_drop_path, block_fn, drop_path)
    embed = stem_layer(stem, patch_size, dpn_variant=dpn_variant, stem_convs=stem_convs, stem_bn=stem_bn,
                       stem_act=stem_act, stem_proj_bn=stem_proj_bn, stem_proj_act=stem_proj_act,
                       stem_strides=stem_strides, stem_width=stem_width)
    model = VisionTransformer(
        img_size=img_size, patch_size=patch_size, in_chans=in_chans, num_classes=num_classes,
        embed_dim=width, depth=depth, num_heads=heads, mlp_ratio=4.0, qkv_bias=True,
        init_values=layerscale, drop_path_rate=drop_path, embed_layer=embed, block_fn=block_fn,
        global_pool="token" if pool == "cls" else "avg", class_token=pool == "cls",
        # DPN "post_posemb": the LN after the position embedding is timm's pre_norm (timm then drops
        # the projection bias, a constant per channel that the learned position embedding absorbs)
        pre_norm=stem == "dpn" and dpn_variant == "post_posemb",
        act_layer=ACTS[ffn_act], mlp_layer=BnMlp if ffn_bn else Mlp, **extra)
    if stem == "dpn":  # timm's init gave DPN's dense projection N(0, 0.02): start it like the patchify
        model.patch_embed.proj.reset_parameters()  # conv it replaces (same fan-in, same default init)
    if not ffn_norm:  # Scaled ReLU Table 5 "LayerNorm removed in ffn"
        _drop_ffn_norm(model)
    if block_norm == "subln":
        _subln_init(model)
    return model


def parameter_groups(model: nn.Module) -> dict[str, list[str]]:
    """Parameter names by part: ``attn`` (names with ``.attn.``), ``ffn`` (``.mlp.``), ``stem``
    (``patch_embed.``), ``patch_proj`` (``patch_embed.proj.``), ``dpn_pixel_norm``
    (``patch_embed.pixel_norm.``, DPN's LayerNorm on raw pixels), ``head``."""
    keys = {"attn": ".attn.", "ffn": ".mlp.", "stem": "patch_embed.", "patch_proj": "patch_embed.proj.",
            "dpn_pixel_norm": "patch_embed.pixel_norm.", "head": "head."}
    names = [n for n, _ in model.named_parameters()]
    # ".x." keys match anywhere in the name, the others are prefixes
    return {k: [n for n in names if (key in n if key[0] == "." else n.startswith(key))]
            for k, key in keys.items()}


FINETUNE_MODES = ("full", "attn", "ffn")
_TUNED_PART = {"attn": ".attn.", "ffn": ".mlp."}
_ALSO_TUNED = ("head.", "pos_embed")  # deit --attn-only also trains the classifier and the position embedding
_NUMBERED_BRANCH = re.compile(r"\.(attn|mlp)\d+\.")  # deit's parallel blocks: attn1, mlp1


def trainable(model_or_names, mode: str) -> tuple[str, ...] | None:
    """``TrainConfig.trainable`` for fine-tuning ``mode`` (Three things Sec. 4, Tables 5-6):
    ``full`` -> None (everything); ``attn`` -> deit's ``--attn-only`` rule (main.py): parameters
    with ``.attn.`` in their name, plus ``head.`` and ``pos_embed``; LayerNorms, LayerScale, FFNs,
    patch embedding and class token stay frozen. ``ffn``: the same rule with ``.mlp.``.

    timm's parallel blocks name every branch ``attns.<i>.attn.`` / ``ffns.<i>.mlp.``, so the rule
    trains all branches. deit's own parallel blocks call the second branch ``attn1`` / ``mlp1``,
    which the substring silently leaves frozen: such names raise here, and so does, given a model,
    any attention or FFN module with a parameter the rule would miss."""
    check_choice("mode", mode, FINETUNE_MODES)
    if mode == "full":
        return None
    from timm.layers import Attention
    key, patterns = _TUNED_PART[mode], (_TUNED_PART[mode], *_ALSO_TUNED)
    if isinstance(model_or_names, nn.Module):
        kind = Attention if mode == "attn" else Mlp
        inside = [f"{m_name}.{p_name}" for m_name, m in model_or_names.named_modules() if isinstance(m, kind)
                  for p_name, _ in m.named_parameters()]
        missed = [n for n in inside if key not in n]  # the trainer's test: a substring of the full name
        names = [n for n, _ in model_or_names.named_parameters()]
    else:
        names = list(model_or_names)
        missed = [n for n in names if (m := _NUMBERED_BRANCH.search(n)) and f".{m[1]}." == key]
    if missed:
        raise ValueError(f"fine-tuning {mode!r} by the name rule {key!r} would leave {len(missed)} parameter(s) "
                         f"frozen, e.g. {missed[:3]}: name every branch's module {key.strip('.')!r}")
    if not any(key in n for n in names):
        raise ValueError(f"no parameter name contains {key!r}, e.g. {names[:5]}")
    return patterns
