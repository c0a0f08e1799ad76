"""Scales at which every experiment runs, chosen by one name (README, "Profiles and the embedded data set").

    from vitmlp.profiles import run_config, seeds
    cfgs = [run_config("cpu", "vit_S", seed=s, lr=1e-3) for s in seeds("cpu")]

| profile | where                      | data                     | model scale                     |
|---------|----------------------------|--------------------------|---------------------------------|
| smoke   | tests: seconds per run     | embedded, 16 px, 256 img | width x1/8, depth x1/4, patch 4 |
| cpu     | 2 cores: 10-50 min per run | embedded, 32 px, 20k img, 48 epochs | width x1/8, depth x1/2, patch 4 |
| gpu     | one GPU: ~8 min per run    | embedded at difficulty 0.8, 32 px, 32k img, 48 epochs | width x1/4, depth x1/2, patch 4 |
| colab   | one GPU (Colab)            | CIFAR-100, 32 px         | width x1/2, depth x1,   patch 4 |
| paper   | a cluster, via ``torchrun`` | ImageNet folder, 224 px  | the paper's models and recipe   |

(``$VITMLP_DATA`` points at CIFAR / ImageNet files; nothing is downloaded.)

A reduced model keeps the paper's ratios: ``width_mult`` / ``depth_mult`` scale every variant the
same way (S48x1 and S24x2 keep equal total blocks and width). ``paper`` passes no multipliers
and no patch size, so the model name alone decides, as in the paper.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Optional

from .train.config import TrainConfig, check_choice

BOOK_PROFILE = "cpu"   # the profile whose results the book shows (results/); others go to results/profiles/
EMBEDDED = "embedded"  # the procedural dataset of vitmlp.data (20k train / 2k val scenes by default)


@dataclass(frozen=True)
class Profile:
    name: str
    dataset: str
    img_size: int
    patch_size: Optional[int]        # None: the patch size in the model's name
    width_mult: Optional[float]      # None: full width
    depth_mult: Optional[float]      # None: full depth
    epochs: int
    batch_size: int
    n_seeds: int                     # seeds per row, to measure run-to-run noise
    train_size: Optional[int]        # None: the whole training set
    val_size: Optional[int]
    dataset_options: dict = field(default_factory=dict)
    recipe: dict = field(default_factory=dict)  # further TrainConfig defaults (optimiser, lr, ...)
    launcher: str = "python"         # "torchrun" for multi-GPU
    parallel_runs: int = 1           # runs trained at once by experiment.run, sharing the cores
    note: str = ""
    # what a notebook's defaults depend on (never the profile's name)
    quick: bool = False              # each item's smallest case (fewer rows, draws, timed rounds): seconds
    on_gpu: bool = False             # meant for GPUs: larger measured batches, L-size models trained
    costly_seeds: Optional[int] = None  # seeds of an item's costliest rows (B/L-size, 4x patches); None: as others
    large_seeds: Optional[int] = None   # seeds of B-size rows beside costlier L rows (Mixer Table 3); None: n_seeds
    provisional: str = ""            # why verdicts trained at this profile are provisional ("" once it is calibrated)

    @property
    def reduced(self) -> bool:
        """Models at the profile's reduced scale; False: the papers' full size (the name gives the patch)."""
        return self.patch_size is not None

    @property
    def patch(self) -> int:
        """The models' patch side: the profile's, or at full size the papers' 16 px (S/16, S12, ...)."""
        return self.patch_size or 16

    @property
    def grid(self) -> int:
        """Patches per image side (224 px / 16 px = 14 at full size)."""
        return self.img_size // self.patch

    @property
    def scale(self) -> dict:
        """The model options the profile gives every model (none at full size but the image size)."""
        opts = dict(img_size=self.img_size, patch_size=self.patch_size, width_mult=self.width_mult,
                    depth_mult=self.depth_mult)
        return {k: v for k, v in opts.items() if v is not None}

    @property
    def exact_scale(self) -> dict:
        """Model options of the exact items' checks: none (the papers' full-size models, 224 px) but at
        a quick profile, whose reduced models prove the code path in seconds."""
        return self.scale if self.quick else {}

    def finer_grid(self) -> dict:
        """Model options for one patch grid finer (ResMLP Table 3's "patch 16 -> 14" row): the paper's
        14-px patches at full size; at a reduced profile one more patch per side on a larger image."""
        return {"img_size": self.img_size + self.patch_size} if self.reduced else {"patch_size": 14}


# DeiT's recipe (the papers' baseline): AdamW, lr 5e-4 x batch/512, wd 0.05, 5 warm-up epochs,
# label smoothing 0.1, RandAugment m9, Mixup 0.8 / CutMix 1.0, random erasing 0.25, repeated aug x3.
_DEIT = dict(optimizer="adamw", lr=5e-4 * 1024 / 512, weight_decay=0.05, warmup_epochs=5.0, min_lr=1e-5,
             label_smoothing=0.1, mixup=0.8, cutmix=1.0, random_erasing=0.25, repeated_aug=3, augment="crop_flip")
_RANDAUG = {"train_transform": {"auto_augment": "rand-m9-mstd0.5-inc1", "interpolation": "bicubic"}}
# Small runs: crop + flip, no Mixup/CutMix (too few epochs to pay off), short warm-up.
_SMALL = dict(optimizer="adamw", lr=1e-3, weight_decay=0.05, warmup_epochs=1.0, min_lr=1e-5, label_smoothing=0.1,
              augment="crop_flip")

# The 3-epoch `cpu` profile of sessions 1-9: what items saved before sidecars named their profile's
# signature were trained at (every reduced / analysis item up to session 9).
SHORT_SCHEDULE = ("trained at the 3-epoch `cpu` profile, whose runs stop far from their plateau (appendix, "
                  "\"Convergence and cost\"): a difference between rows says how fast a variant starts learning, "
                  "not what it learns; the chapter is re-run at a recalibrated profile")

PROFILES = {
    "smoke": Profile("smoke", EMBEDDED, img_size=16, patch_size=4, width_mult=0.125, depth_mult=0.25, epochs=1,
                     batch_size=32, n_seeds=1, train_size=256, val_size=128, dataset_options={"n": 384},
                     recipe=dict(_SMALL, warmup_epochs=0.0), quick=True,
                     note="proves the code path in seconds; never shown as a result"),
    # Calibrated in the appendix ("Convergence and cost"): 48 epochs of 20k images at lr 4e-3 bring ViT-S,
    # ResMLP-S12 and Mixer-S/16 near their plateau (24 epochs do not: ViT-S gains 4+ points from doubling);
    # width x1/8 halves the cost of x1/4. Batch 128: batch 64 gave fewer images/s on 2 cores and no faster
    # learning. bf16 autocast where the hardware does bf16 natively, fp32 elsewhere (emulated bf16 ran 14x
    # slower on an AVX2 CPU); the record says which, and the appendix compares the two.
    "cpu": Profile("cpu", EMBEDDED, img_size=32, patch_size=4, width_mult=0.125, depth_mult=0.5, epochs=48,
                   batch_size=128, n_seeds=3, train_size=None, val_size=None,
                   recipe=dict(_SMALL, lr=4e-3, precision="auto"),
                   parallel_runs=2, costly_seeds=1, large_seeds=2,
                   note="the book's numbers: trained near the plateau, 10-50 minutes per run on 2 CPU cores"),
    # The cpu profile's task sits near the ceiling (ViT-S 97.6, ResMLP-S12 98.7, Mixer-S/16 99.4 %), where
    # the papers' 0.5-2 point effects are compressed. `gpu` keeps its recipe and ratios (lr 4e-3, batch 128,
    # 48 epochs, patch 4 on 32 px: 8x8 tokens, depth x1/2) and moves the rest: a harder task (difficulty
    # 0.8: ResMLP-S12 86-87 %, Mixer-S/16 77-86 % at the cpu scale in the calibration sweep), 1.6x the
    # training images, twice the width, 5 seeds and 10k validation images (binomial s.e. ~0.35 points at
    # 85 %, against ~0.8 on 2k). A run (1.5M images) fits one 10-minute call of a lent GPU, 16 at once
    # (an H200 trained 14 cpu-profile runs at once at ~4.3k images/s each). Provisional: its first calibration
    # call (H200, lr 4e-3) left ViT-S untrained (11-25 %) and Mixer-S/16's seeds split (70 / 93 %); the lower
    # rates are queued (scripts/gpu_profile_queue.py), the appendix reads them.
    "gpu": Profile("gpu", EMBEDDED, img_size=32, patch_size=4, width_mult=0.25, depth_mult=0.5, epochs=48,
                   batch_size=128, n_seeds=5, train_size=None, val_size=10_000,
                   dataset_options={"difficulty": 0.8, "n": 32_000},
                   recipe=dict(_SMALL, lr=4e-3, precision="auto"), on_gpu=True, costly_seeds=3, large_seeds=3,
                   provisional="the gpu profile is not calibrated yet: at its lr 4e-3 ViT-S did not train and "
                               "Mixer-S/16's seeds split (appendix); lower rates are queued (scripts/gpu_profile_queue.py)",
                   note="one GPU: the embedded task made harder, below the ceiling, where 0.5-2 point effects resolve"),
    # The former gpu profile, for Colab readers with the CIFAR-100 files under $VITMLP_DATA (not fetched here).
    "colab": Profile("colab", "cifar100", img_size=32, patch_size=4, width_mult=0.5, depth_mult=1.0, epochs=100,
                        batch_size=256, n_seeds=2, train_size=None, val_size=None,
                        recipe=dict(_SMALL, warmup_epochs=5.0, mixup=0.8, cutmix=1.0), on_gpu=True,
                        note="one GPU (Colab): real data (CIFAR-100 files at $VITMLP_DATA), larger models"),
    "paper": Profile("paper", "imagefolder", img_size=224, patch_size=None, width_mult=None, depth_mult=None,
                     epochs=300, batch_size=1024, n_seeds=1, train_size=None, val_size=None,
                     dataset_options=_RANDAUG, recipe=_DEIT,
                     launcher="torchrun", on_gpu=True, note="the papers' recipe on ImageNet (DeiT), multi-GPU"),
}


def signature(name: str) -> str | None:
    """A short hash of a profile's definition (None for a name that is no profile): an item records it,
    so the book can tell an item made at an earlier definition of the same profile name."""
    if name not in PROFILES:
        return None
    fields = {k: v for k, v in dataclasses.asdict(PROFILES[name]).items() if k not in ("note", "provisional")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:12]


def get_profile(name: str) -> Profile:
    check_choice("profile", name, list(PROFILES))
    return PROFILES[name]


def seeds(profile: str, seeds=None) -> list[int]:
    """The seeds of a run: None -> the profile's (0 .. n_seeds-1); a count n -> 0 .. n-1; or a list of seeds >= 0."""
    if seeds is None:
        return list(range(get_profile(profile).n_seeds))
    is_int = lambda s: isinstance(s, int) and not isinstance(s, bool)  # noqa: E731
    if is_int(seeds) and seeds > 0:
        return list(range(seeds))
    if isinstance(seeds, (list, tuple)) and seeds and all(is_int(s) and s >= 0 for s in seeds):
        return list(seeds)
    raise ValueError(f"seeds must be a positive count or a list of seeds >= 0, got {seeds!r}")


def train_images(profile: str) -> int:
    """Training images per epoch at ``profile``: its ``train_size``, else the whole training split."""
    p = get_profile(profile)
    if p.train_size:
        return p.train_size
    from .data import build_dataset  # imported late: building a profile needs no data
    return len(build_dataset(p.dataset, "train", p.img_size, **p.dataset_options))


def run_config(profile: str, model: str, *, model_options: dict | None = None,
               dataset_options: dict | None = None, **overrides) -> TrainConfig:
    """The profile's defaults for ``model``, then the experiment's changes.

    model_options are merged over the profile's ``img_size / patch_size / width_mult /
    depth_mult`` (a value of None removes a key, e.g. for a ``timm:`` model); dataset_options over
    the profile's (dropped when ``dataset=`` names another data set); ``overrides`` are
    TrainConfig fields (``lr=``, ``epochs=``, ``seed=``, ``sam_rho=`` ...) and win over the profile.
    """
    p = get_profile(profile)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    for k in overrides:
        check_choice("TrainConfig field", k, sorted(names - {"model", "model_options", "dataset_options", "profile"}))
    img_size = overrides.get("img_size", p.img_size)
    opts = {"img_size": img_size, "patch_size": p.patch_size, "width_mult": p.width_mult, "depth_mult": p.depth_mult}
    opts.update(model_options or {})
    opts = {k: v for k, v in opts.items() if v is not None}
    base = dict(dataset=p.dataset, img_size=p.img_size, batch_size=p.batch_size, epochs=p.epochs,
                train_size=p.train_size, val_size=p.val_size, **p.recipe)
    # the profile's dataset options belong to its dataset: another dataset starts from none
    own = p.dataset_options if overrides.get("dataset", p.dataset) == p.dataset else {}
    return TrainConfig(model=model, model_options=opts, dataset_options={**own, **(dataset_options or {})},
                       profile=p.name, **{**base, **overrides})


# --- recipes at a profile's scale ----------------------------------------------------------------
# Options a profile gives every model (vitmlp.profiles.run_config) that a timm convnet does not take.
NO_VIT_OPTIONS = {"patch_size": None, "width_mult": None, "depth_mult": None, "img_size": None}


def paper_steps(profile: str, epochs: float, of: float = 400) -> int:
    """Updates that stand for ``epochs`` of a paper that trains ``of`` epochs: the same fraction
    of the profile's run (at least one)."""
    p = get_profile(profile)
    return max(1, round(p.epochs * (train_images(profile) // p.batch_size) * epochs / of))


def paper_epochs(profile: str, epochs: float, of: float | None = None) -> float:
    """Epochs (a float: warm-ups, evaluation points) that stand for ``epochs`` of a paper that
    trains ``of`` epochs (None: the ``paper`` profile's, DeiT's 300): the same fraction of the
    profile's epochs."""
    of = PROFILES["paper"].epochs if of is None else of
    if not (epochs >= 0 and of > 0):
        raise ValueError(f"paper_epochs needs epochs >= 0 and of > 0, got epochs={epochs!r}, of={of!r}")
    return get_profile(profile).epochs * epochs / of


# SGD's learning rate at a profile, as a multiple of ResNet's rule. The papers state none for their SGD
# rows; at ResNet's rule the reduced ResMLP-S12 stays at chance for most of the cpu run. The appendix's
# sweep ("SGD at the reduced scale", x1/2/4/8, two seeds) takes the largest rate whose every seed trained
# and reached its plateau: x4 (x8 still rose over its last quarter, and diverged on some seeds in the
# SGD rows of ResMLP's D.1). Not a Profile field: only the SGD rows depend on it; their configs carry it.
SGD_LR_SCALE = {"cpu": 4.0}


def sgd_lr_scale(profile: str | None) -> float:
    """SGD's rate at ``profile`` as a multiple of ResNet's rule (1 where the profile sets none)."""
    return SGD_LR_SCALE.get(profile, 1.0)


def sgd_recipe(batch: int, profile: str | None = None) -> dict:
    """ResNet's optimiser: SGD with momentum, lr 0.1 x batch/256, weight decay 1e-4; at ``profile``
    the rate times the profile's ``SGD_LR_SCALE`` (None: ResNet's rule as written)."""
    return dict(optimizer="momentum", lr=0.1 * batch / 256 * sgd_lr_scale(profile), weight_decay=1e-4)


def resnet_recipe(profile: str, epochs: float = 90, of: float = 400) -> dict:
    """TrainConfig overrides for the "old-fashioned" ResNet-50 recipe at the profile's scale: SGD at its rate,
    no label smoothing, the lr divided by 10 every third of training, and ``epochs`` of the paper's
    ``of`` as a fraction of the profile's updates (ResMLP Tables 3 and D.1). No warm-up at ResNet's own
    rate; at a profile's multiple of it, the profile's warm-up, as Goyal et al. warm ResNet-50 up once
    they scale its rate up (appendix, "SGD at the reduced scale", shows the recipe with and without)."""
    p, steps = get_profile(profile), paper_steps(profile, epochs, of)
    warmup = p.recipe.get("warmup_epochs", 0.0) if sgd_lr_scale(profile) != 1.0 else 0.0
    return dict(batch_size=p.batch_size, **sgd_recipe(p.batch_size, profile), label_smoothing=0.0, warmup_epochs=warmup,
                sched="step", decay_epochs=steps / 3 / (train_images(profile) // p.batch_size), decay_rate=0.1,
                steps=steps)
