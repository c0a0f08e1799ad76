"""Three things, Sec. 4 (Tables 5-6): fine-tune a pre-trained reduced ViT in full, attention only
(``attn``) or FFN only (``ffn``), at a higher resolution or on another data set.

    pre = pretrained("cpu", "S")                        # Table 1's ViT-S +LS at 4/3 of the schedule
    arm = finetune_arm("cpu", pre, "attn", "sgd", img_size=finetune_size("cpu"))   # Table 5's S / SGD / attn
    arm = finetune_arm("cpu", pre, "ffn", dataset="digits", epochs=...)             # Table 6

The pre-trained models are the paper's (Sec. 4: "trained long enough (400 epochs)", with
LayerScale, Table 1's last column): ``parallel_vit.arm(..., ls=True, longer=True)``, seed 0, the
same cached runs as Table 1. The paper gives no fine-tuning recipe; the book's: each optimiser's
from-scratch learning rate (AdamW: the run's own; SGD: ResNet's 0.1 x batch/256 with momentum 0.9
and weight decay 1e-4) divided by ``LR_DIVISOR``, no warm-up, cosine decay; the trainable set of
``models.vit.trainable`` (deit's ``--attn-only`` rule).
"""
from __future__ import annotations

import torch

from . import parallel_vit as pv
from .choices import check_choice
from .experiment import Arm, plan
from .models import create_model
from .models.vit import DEPTHS, FINETUNE_MODES, trainable
from .profiles import get_profile, run_config, sgd_recipe
from .records import config_hash

OPTIMIZERS = {"AdamW": "adamw", "SGD": "momentum"}  # the paper's column -> TrainConfig.optimizer (SGD + momentum)
LR_DIVISOR = 10                                     # fine-tuning lr = from-scratch lr / 10 (weights start trained)
PAPER_FROM, PAPER_TO = 224, 384                     # Table 5: pre-trained at 224 px, fine-tuned at 384 px


def pretrained(profile: str, width: str) -> tuple[Arm, object]:
    """(arm, config of its seed-0 run) of the pre-trained ViT-``width``: Table 1's 4/3 schedule with LayerScale."""
    arm = pv.arm(profile, width, DEPTHS[width], ls=True, longer=True, label=f"ViT-{width} pre-trained")
    return arm, plan(profile, [arm], seeds=[0])[0][1]


def finetune_size(profile: str) -> int:
    """The image side that stands for 384 px when pre-training was at the profile's size (224 px): the
    patch grid grown by 384/224 and rounded (14 -> 24 patches at 16 px; 8 -> 14 at 4-px patches, 56 px)."""
    P = get_profile(profile)
    return round(P.grid * PAPER_TO / PAPER_FROM) * P.patch


def finetune_arm(profile: str, pre: tuple[Arm, object], mode: str, optimizer: str = "AdamW", *,
                 label: str | None = None, **overrides) -> Arm:
    """The fine-tuning of ``pre`` (from :func:`pretrained`) in ``mode`` (full / attn / ffn) with the
    paper's ``optimizer`` column (AdamW / SGD); ``overrides`` are further TrainConfig fields
    (``img_size=``, ``dataset=``, ``epochs=``). The model keeps the pre-trained one's options; a new
    image size or data set changes the position embedding's grid (resampled) or the head (new)."""
    check_choice("mode", mode, FINETUNE_MODES)
    check_choice("optimizer", optimizer, list(OPTIMIZERS))
    arm, cfg = pre
    if optimizer == "SGD":
        recipe = sgd_recipe(cfg.batch_size)
    else:
        recipe = dict(optimizer="adamw", lr=cfg.lr)
    recipe["lr"] = recipe["lr"] / LR_DIVISOR
    size = {k: v for k, v in overrides.items() if k == "img_size"}   # run_config gives it to the model too
    with torch.device("meta"):  # the trainable set from the model's own parameter names
        model = create_model(arm.model, **run_config(profile, arm.model, model_options=arm.model_options,
                                                     **size).model_options)
    keep = trainable(model, mode)
    over = {**recipe, "warmup_epochs": 0.0, "init_from": config_hash(cfg), **overrides}
    if keep is not None:
        over["trainable"] = list(keep)
    return Arm(label or f"{arm.label.removesuffix(' pre-trained')} {optimizer} {mode}", arm.model, dict(arm.model_options), over)


def train_images(cfg) -> int:
    """Training images per epoch of a run: its ``train_size`` cap of its data set's training split."""
    from .data import build_dataset
    from .data.loaders import EMBEDDED_N
    if cfg.dataset in EMBEDDED_N:   # the embedded sets' size without rendering them
        n = cfg.dataset_options.get("n") or EMBEDDED_N[cfg.dataset]["train"]
    else:
        n = len(build_dataset(cfg.dataset, "train", cfg.img_size, **cfg.dataset_options))
    return min(n, cfg.train_size or n)


def cost(profile: str, arms: list[Arm], base: Arm) -> dict[str, float]:
    """Each arm's training cost in runs of ``base``: ``parallel_vit.cost`` (multiply-adds per image at
    the arm's resolution x epochs) x the arm's training images per epoch / the base's. An upper bound
    for attn / ffn, whose frozen weights need no weight gradients."""
    per_image = pv.cost(profile, arms, base)
    images = lambda a: train_images(run_config(profile, a.model, model_options=a.model_options,  # noqa: E731
                                               dataset_options=a.dataset_options, **a.overrides))
    unit = images(base)
    return {a.label: per_image[a.label] * images(a) / unit for a in arms}


def unsettled_by_pretraining(runs, finetunes: dict) -> "pd.Series":
    """Per fine-tuning run of ``runs`` (rows of ``experiment.run``, the pre-trained models' included),
    why its pre-trained model cannot carry a claim, else None: it did not train, or it still rose by
    more than ``stats.PLATEAU_POINTS`` over its last quarter (the paper fine-tunes models "trained long
    enough (400 epochs) to ensure convergence"; a full fine-tuning of a model still learning would
    gain for that alone). ``finetunes``: fine-tuning label -> its pre-trained label. Set as the runs'
    ``unsettled`` column, ``stats.at_plateau`` makes every claim on them inconclusive and says why."""
    from .stats import chance_level, rising, why_untrained
    pre_runs = runs[runs.label.isin(set(finetunes.values()))]
    ok = pre_runs[pre_runs.status == "ok"]
    chance, late = chance_level(pre_runs), set(rising(pre_runs))
    why = {}
    for pre in set(finetunes.values()):
        why[pre] = (f"its pre-trained model ({pre}) did not train" if why_untrained(ok, [pre], chance)
                    else f"its pre-trained model ({pre}) still rose over its last quarter" if pre in late else None)
    return runs.label.map(lambda label: why.get(finetunes.get(label)))
