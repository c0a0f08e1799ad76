"""One registry for every model of the five papers.

A model name is ``<family>_<spec>``: ``vit_S24x2``, ``resmlp_S12``, ``mixer_B16``;
``timm:<name>`` builds any timm architecture (untrained) for comparison rows.
Options are keyword arguments of the family's builder; unknown names or options fail
with a message that lists the valid choices.
"""
from __future__ import annotations

import difflib
import inspect
import math
from typing import Callable

import torch.nn as nn

from ..choices import check_choice  # noqa: F401  (re-exported for the model families)

# The activations a model option may name (stems, ResMLP's MLPs): one table for every family.
ACTS = {"gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU, "hardswish": nn.Hardswish, "none": nn.Identity}

_FAMILIES: dict[str, Callable[..., nn.Module]] = {}
_EXAMPLES: dict[str, list[str]] = {}


def register(family: str, examples: list[str]):
    """Register ``builder(spec: str, **options) -> nn.Module`` under ``family``.

    ``examples`` are the paper's variants, listed by :func:`list_models`.
    """
    def deco(builder):
        _FAMILIES[family] = builder
        _EXAMPLES[family] = [f"{family}_{e}" for e in examples]
        return builder
    return deco


def list_models(family: str | None = None) -> list[str]:
    fams = [family] if family else sorted(_FAMILIES)
    for f in fams:
        check_choice("model family", f, sorted(_FAMILIES))
    return [n for f in fams for n in _EXAMPLES[f]]


def _int(lo):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _real(ok):
    return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and ok(v)


# Options shared by the families (and timm): the rule and what it allows, checked before a build.
OPTION_RULES = {
    "img_size": (_int(1), "an int >= 1"), "patch_size": (_int(1), "an int >= 1"),
    "num_classes": (_int(0), "an int >= 0 (0: no head)"), "in_chans": (_int(1), "an int >= 1"),
    "width_mult": (_real(lambda v: v > 0), "a number > 0"), "depth_mult": (_real(lambda v: v > 0), "a number > 0"),
    "drop_path": (_real(lambda v: 0 <= v < 1), "a number in [0, 1)"),
    "drop_path_rate": (_real(lambda v: 0 <= v < 1), "a number in [0, 1)"),
}


def check_model_options(options: dict) -> None:
    """Refuse a shared option of the wrong type or range, naming it and what is allowed."""
    for k, v in options.items():
        ok, allowed = OPTION_RULES.get(k, (None, None))
        if ok and not ok(v):
            raise ValueError(f"bad model option {k}={v!r}: must be {allowed}")
    img, patch = options.get("img_size"), options.get("patch_size")
    if isinstance(img, int) and isinstance(patch, int) and img % patch:
        raise ValueError(f"bad model options: img_size {img} is not a multiple of patch_size {patch}")


def create_model(name: str, **options) -> nn.Module:
    """Build a model by name, e.g. ``create_model("vit_S24x2", layerscale=1e-5)``."""
    if not isinstance(name, str):
        raise ValueError(f"a model name must be a string, got {name!r}")
    check_model_options(options)
    if name.startswith("timm:"):
        import timm
        arch = name[len("timm:"):]
        if arch not in timm.list_models():
            close = difflib.get_close_matches(arch, timm.list_models(), n=8)
            hint = f"close valid choices: {', '.join(close)}" if close else "see timm.list_models() for valid names"
            raise ValueError(f"unknown timm model {arch!r}; {hint}")
        return timm.create_model(arch, pretrained=False, **options)
    family, sep, spec = name.partition("_")
    if not sep or family not in _FAMILIES:
        raise ValueError(f"unknown model {name!r}; valid families: {', '.join(sorted(_FAMILIES))} "
                         f"(e.g. {', '.join(list_models()[:8])}, ...) or timm:<architecture>")
    builder = _FAMILIES[family]
    params = inspect.signature(builder).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        valid = [k for k, p in params.items() if p.kind is p.KEYWORD_ONLY]
        for k in options:
            check_choice(f"option for {family}", k, valid)
    return builder(spec, **options)


def fused_attention(model: nn.Module, on: bool) -> list[nn.Module]:
    """Switch timm's fused attention kernel (SDPA) on or off in every attention module of ``model``;
    returns the modules it changed. Off: the explicit softmax(QK^T)V, which counters see and which
    trained reduced ViTs 1.3x faster on a CPU (head dim 8: 733 vs 559 img/s, make bench)."""
    mods = [m for m in model.modules() if getattr(m, "fused_attn", None) is (not on)]
    for m in mods:
        m.fused_attn = on
    return mods


def scale_width(width: int, mult: float, multiple_of: int) -> int:
    """Reduced width for the small profiles, kept a multiple of ``multiple_of`` (e.g. heads)."""
    return max(multiple_of, int(round(width * mult / multiple_of)) * multiple_of)


def scale_depth(depth: int, mult: float) -> int:
    """Reduced depth; equal total blocks stay equal (S48x1 and S24x2 both scale by ``mult``)."""
    return max(1, int(round(depth * mult)))
