"""Three things, Sec. 2-3 (Tables 1-3, Figures 1-3): the ViT runs of the baseline and parallel-ViT
items, built in one place, so a configuration that two notebooks train is one cached run (Figure 1's
B36x1 is Table 2's 300-epoch row without LayerScale, Table 3's B36x1 its row with LayerScale; Figure 2's
L24x1 is Table 3's L24x1, all at :func:`section3_scale`; Table 1's ViT-S is Table 7's linear-stem row).

    arm("cpu", "B", 36)                        # ViT-B36x1 at the profile's schedule (the paper's 300 epochs)
    arm("cpu", "B", 36, branches=2, ls=True)   # ViT-B18x2 with LayerScale
    arm("cpu", "S", 12, longer=True)           # ViT-S at 4/3 of the schedule (the paper's 400 epochs)
    arm("cpu", "S", 60, 4, scale=section3_scale("cpu"))   # Figure 1's S15x4 at Sec. 3's scale: whole branches

The paper's recipe (Sec. 2.2) at the profile's scale: the profile's learning rate for Ti/S and 3/4
of it for B/L (the paper: 4e-3 and 3e-3); stochastic depth per width as printed, constant over depth
as in the official code (deit ``models_v2.py``); LayerScale initialised at 1e-4 as there (timm's
``*_18x2`` models use 1e-5). A reduced model keeps the paper's block counts through the profile's
``depth_mult``, applied to the blocks of each branch (``vit.build``). Where that multiplier cannot
build every branch whole (Figure 1 splits 36 and 60 blocks into 1-4 branches: 9 x 1/2 is no whole
depth), :func:`split_scale` gives the depth multiplier that can and narrows the width to pay for it;
the parallel-ViT items (Sec. 3: Tables 2-3, Figures 1-3) share one such scale, :func:`section3_scale`,
so that their common rows stay one run each and the paper's depth ratios hold across them.

Seeds: every B/L row of the chapter enters a claim, and a claim needs an interval (two seeds or more
on both sides of a pair), so :func:`row_seeds` gives the B/L rows the same seeds as the others; the
profile's ``costly_seeds`` is a saving the caller asks for, and :func:`seed_note` says which rows it
leaves without a verdict.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
from timm.layers import Attention

from .choices import check_choice, check_int
from .experiment import Arm
from .models import create_model
from .models.registry import scale_depth
from .models.vit import WIDTHS
from .profiles import get_profile, run_config
from .profiles import seeds as profile_seeds

LAYERSCALE = 1e-4                                        # deit models_v2.py init_values (timm's 18x2: 1e-5)
DROP_PATH = {"Ti": 0.0, "S": 0.05, "B": 0.1, "L": 0.4}  # Sec. 2.2 "sd", per width
LR_SCALE = {"Ti": 1.0, "S": 1.0, "B": 0.75, "L": 0.75}  # Sec. 2.2: lr 4e-3 for Ti/S, 3e-3 for B/L
COSTLY_WIDTHS = ("B", "L")                               # rows a caller may give fewer seeds (row_seeds)
PAPER_EPOCHS, LONGER_EPOCHS = 300, 400                   # the main baseline and the longer one


def longer_epochs(profile: str) -> int:
    """The profile's epochs x 400/300 (the paper's longer schedule), at least one epoch more."""
    e = get_profile(profile).epochs
    return max(e + 1, round(e * LONGER_EPOCHS / PAPER_EPOCHS))


def spec(width: str, blocks: int, branches: int = 1) -> str:
    """The paper's name of ``blocks`` MHSA+FFN pairs in ``branches`` parallel branches: ("B", 36, 2) -> "B18x2"."""
    check_choice("width", width, list(WIDTHS))
    check_int("blocks", blocks)
    check_int("branches", branches)
    if blocks % branches:
        raise ValueError(f"{blocks} blocks do not split into {branches} equal branches")
    return f"{width}{blocks // branches}x{branches}"


def arm(profile: str, width: str, blocks: int, branches: int = 1, *, ls: bool = False, longer: bool = False,
        stem: str = "linear", scale: dict | None = None, label: str | None = None) -> Arm:
    """One run of the chapter's ViT items (see the module's docstring for the recipe). ``stem``: a
    ``stems.STEMS`` kind (Table 7); the linear one enters no option, so a linear-stem row is the run
    of Table 1. ``scale``: model options over the profile's multipliers (:func:`section3_scale`).
    Default label: ``B18x2``, ``+LS`` with LayerScale, ``(4/3 schedule)`` for the paper's 400 epochs,
    ``hmlp_bn stem`` for another stem."""
    from .models.stems import STEMS
    name = spec(width, blocks, branches)
    check_choice("stem", stem, STEMS)
    options = {"drop_path": DROP_PATH[width], "drop_path_schedule": "constant"} if DROP_PATH[width] else {}
    if ls:
        options["layerscale"] = LAYERSCALE
    if stem != "linear":
        options["stem"] = stem
    for k, v in (scale or {}).items():
        check_choice("scale option", k, ["depth_mult", "width_mult"])
        options[k] = v
    overrides = {}
    if LR_SCALE[width] != 1:
        overrides["lr"] = run_config(profile, "vit_S").lr * LR_SCALE[width]
    if longer:
        overrides["epochs"] = longer_epochs(profile)
    label = label or name + (" +LS" if ls else "") + (" (4/3 schedule)" if longer else "") \
        + (f" {stem} stem" if stem != "linear" else "")
    return Arm(label, f"vit_{name}", options, overrides)


def split_scale(profile: str, depths) -> dict:
    """Model options that build every per-branch depth of ``depths`` (the paper's blocks per branch)
    whole, so that a fixed total split into branches keeps its total and the paper's depth ratios hold
    exactly: the smallest depth multiplier at or above the profile's for which each depth x it is an
    integer (a multiple of 1/gcd(depths)), and the profile's width multiplier x sqrt(the profile's depth
    multiplier / that one), so that a run costs about the multiply-adds the profile spends on the same
    paper model (they grow as depth x width^2). ``{}`` where the profile's multiplier already builds
    every depth whole (and at full size). Figure 1's 36 and 60 blocks in 1-4 branches (9, 12, 15, 18,
    20, 30, 36, 60: gcd 1) need the paper's full depth: at ``cpu`` (depth x1/2, width x1/8) they build
    at depth x1 and width x1/8/sqrt(2)."""
    p = get_profile(profile)
    depths = [check_int("depth", d) for d in depths]
    mult = p.depth_mult or 1.0
    g = math.gcd(*depths) if depths else 1
    exact = math.ceil(round(mult * g, 9)) / g     # round: a float product such as 0.1 * 30 is 3.0000000000000004
    if exact == mult:
        return {}
    return {"depth_mult": exact, "width_mult": round((p.width_mult or 1.0) * math.sqrt(mult / exact), 4)}


# The paper's Sec. 3 models as (total blocks, branches): Figure 1 (36 and 60 blocks in 1-4 branches),
# Figure 2 (24 blocks, 1-2), Figure 3 (S: 12-60 blocks, B: 12-36, 1-2), Tables 2-3.
SECTION3 = sorted({*[(b, br) for b in (36, 60) for br in (1, 2, 3, 4)], *[(24, br) for br in (1, 2)],
                   *[(b, br) for b in (12, 24, 36, 48, 60) for br in (1, 2)],
                   (12, 1), (48, 1), (48, 2), (24, 1), (36, 1), (36, 2)})


def section3_scale(profile: str, extra=()) -> dict:
    """:func:`split_scale` of the paper's Sec. 3 models (``SECTION3``) and of ``extra`` (total blocks,
    branches) pairs: the one scale of the parallel-ViT items (Tables 2-3, Figures 1-3), so a row two
    of them train is one run, every split keeps its total and S60x1 is the chapter's deepest model."""
    pairs = [*SECTION3, *extra]
    for b, br in pairs:
        spec("S", b, br)   # refuses a total that does not split into its branches
    return split_scale(profile, {b // br for b, br in pairs})


def built_blocks(profile: str, a: Arm) -> tuple[int, int, int]:
    """(layers, MHSA+FFN blocks in all branches, width) of ``a``'s model as ``profile`` builds it (meta device)."""
    cfg = run_config(profile, a.model, model_options=a.model_options, **a.overrides)
    with torch.device("meta"):
        m = create_model(cfg.model, **cfg.model_options)
    branches = int(a.model.rsplit("x", 1)[1]) if "x" in a.model.removeprefix("vit_") else 1
    return len(m.blocks), len(m.blocks) * branches, m.embed_dim


def row_seeds(profile: str, seeds=None, costly_seeds=None) -> tuple[list[int], list[int]]:
    """(seeds of the chapter's rows, seeds of its B/L rows). ``seeds``: None -> the profile's. Every
    B/L row of this chapter enters a claim about the large models, and a pair gets an interval (hence
    a verdict) only with two seeds or more on both sides, so the B/L rows train ``seeds`` too unless
    ``costly_seeds`` asks for fewer (a saving: :func:`seed_note` says what it costs in verdicts); the
    profile's own ``costly_seeds`` is not the default here."""
    s = profile_seeds(profile, seeds)
    return s, (s if costly_seeds is None else profile_seeds(profile, costly_seeds))


def seed_note(runs: list[tuple]) -> str:
    """A sentence for the page: the rows of ``runs`` ((label, config) from ``plan``) planned with
    fewer than two seeds, whose pairs get no interval and so no verdict; "" when every row has two or more."""
    n = {}
    for label, _ in runs:
        n[label] = n.get(label, 0) + 1
    few = [label for label, k in n.items() if k < 2]
    if not few:
        return ""
    return (f"{len(few)} of {len(n)} rows train a single seed ({', '.join(few)}): no interval, so every pair "
            "they enter gets no verdict (\"fewer than 2 seeds\"); pass more seeds to judge them")


def one_more_block(profile: str, blocks: int) -> int:
    """The block count whose model has one block more than ``blocks``'s once ``profile`` scales the
    depth (Table 7's ViT-B13 beside the B12): 13 at full size; at depth x1/2 the 12 blocks train as 6
    and 13 would round to 6 as well, so the extra block is spec 14 (7 blocks)."""
    check_int("blocks", blocks)
    mult = get_profile(profile).depth_mult or 1.0
    depth = (lambda d: d) if mult == 1 else (lambda d: scale_depth(d, mult))  # as vit.build applies it
    more = blocks + 1
    while depth(more) <= depth(blocks):
        more += 1
    return more


def costly(a: Arm) -> bool:
    """True for B- and L-width runs: the rows a caller may give fewer seeds (:func:`row_seeds`)."""
    return a.model.removeprefix("vit_").startswith(COSTLY_WIDTHS)


def forward_macs(model: nn.Module) -> int:
    """Multiply-adds of a ViT's forward pass on one image, from its shapes (a model on the meta device
    will do): every linear layer once per token, the stem's layers at their own resolution
    (:func:`stem_macs`), and QK^T and AV in each attention (2 N^2 D); fvcore's count
    (``measure.count_macs``) without tracing."""
    tokens = model.patch_embed.num_patches + model.num_prefix_tokens
    stem = set(model.patch_embed.modules())   # counted by stem_macs
    linear = sum(m.weight.numel() for m in model.modules()
                 if isinstance(m, nn.Linear) and m is not model.head and m not in stem)
    attn = sum(2 * tokens ** 2 * m.qkv.in_features for m in model.modules() if isinstance(m, Attention))
    return linear * tokens + stem_macs(model.patch_embed) + attn + model.head.weight.numel()


def stem_macs(stem: nn.Module) -> int:
    """Multiply-adds of a patch stem on one image (norms and activations not counted): each conv, in
    the order it runs, at its output resolution (the hMLP stem's 4/4 and 2/2 convs, LeViT's stride-2
    3x3s, the patchify conv), a dense layer once per patch (Dual PatchNorm)."""
    h, w = stem.img_size
    macs = 0
    for m in stem.modules():   # registration order is the order a ConvStem runs its layers
        if isinstance(m, nn.Conv2d):
            (kh, kw), (sh, sw), (ph, pw) = m.kernel_size, m.stride, m.padding
            h, w = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
            macs += m.weight.numel() * h * w
        elif isinstance(m, nn.Linear):
            macs += m.weight.numel() * stem.num_patches
    return macs


def macs(profile: str, a: Arm) -> int:
    """Multiply-adds per image of ``a``'s model at ``profile`` (:func:`forward_macs`, built on the meta device)."""
    cfg = run_config(profile, a.model, model_options=a.model_options, **a.overrides)
    with torch.device("meta"):
        return forward_macs(create_model(cfg.model, **cfg.model_options))


def cost(profile: str, arms: list[Arm], base: Arm) -> dict[str, float]:
    """Each arm's training cost in runs of ``base``: multiply-adds per image x epochs."""
    counted = {}

    def work(a: Arm) -> float:
        cfg = run_config(profile, a.model, model_options=a.model_options, **a.overrides)
        key = (cfg.model, str(sorted(cfg.model_options.items())))
        if key not in counted:  # the same model at another schedule is counted once
            counted[key] = macs(profile, a)
        return counted[key] * cfg.epochs
    unit = work(base)
    return {a.label: work(a) / unit for a in arms}
