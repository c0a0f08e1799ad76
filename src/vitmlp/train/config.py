"""The config of one training run, validated at construction (before anything is trained or written).

The run's hash covers every field that differs from its default, except ``device``. So a new
field with a default leaves every existing record valid; **never change a default** (that would
give old records a new meaning): add a field, or set the value in a profile.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from ..choices import check_choice

OPTIMIZERS = ("adamw", "lamb", "sgd", "momentum", "adam")  # timm names; timm's "sgd" is Nesterov
SCHEDULES = ("cosine", "step", "constant")                # lr per update step, warm-up first
DISTILL = ("none", "hard", "soft")                         # DeiT hard / soft (KL) distillation
PRECISIONS = ("fp32", "bf16", "auto")  # bf16 = autocast, weights stay fp32; auto = bf16 where native, else fp32
DEVICES = ("auto", "cpu", "cuda")
AUGMENTS = ("none", "crop_flip")                          # in memory: pad+crop+flip; files: timm's transform
PIXEL_SHUFFLES = ("none", "patch", "global")               # MLP-Mixer Figure 4
NOT_HASHED = ("device", "compile")  # where and how a run executes (fused kernels) does not change what it is




@dataclass
class TrainConfig:
    # what is trained, on what
    model: str                                   # name for vitmlp.models.create_model
    model_options: dict = field(default_factory=dict)
    dataset: str = "embedded"                    # name for vitmlp.data.build_dataset
    dataset_options: dict = field(default_factory=dict)
    img_size: int = 32
    train_size: Optional[int] = None             # first N of a fixed permutation (nested subsets)
    val_size: Optional[int] = None
    # how long
    batch_size: int = 128                        # global batch (split over DDP ranks)
    epochs: int = 10
    steps: Optional[int] = None                  # fixed number of updates; overrides epochs
    stop_epoch: Optional[int] = None             # a probe: train the schedule's first N epochs only (lr as in the whole)
    # optimisation (timm.optim.create_optimizer_v2, timm.scheduler.create_scheduler_v2)
    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.05
    momentum: float = 0.9
    sched: str = "cosine"
    warmup_epochs: float = 0.0
    warmup_lr: float = 1e-6
    min_lr: float = 1e-5
    decay_epochs: float = 30.0                   # "step" schedule: decay every ...
    decay_rate: float = 0.1
    clip_grad: Optional[float] = None            # max global grad norm
    sam_rho: float = 0.0                         # > 0: SAM around the optimizer (radius rho)
    # regularisation
    label_smoothing: float = 0.0
    mixup: float = 0.0                           # alpha; 0 = off (timm.data.Mixup)
    cutmix: float = 0.0                          # alpha; 0 = off
    random_erasing: float = 0.0                  # probability (timm RandomErasing, on the batch)
    repeated_aug: int = 1                        # each sampled image k times in its batch (DeiT RA)
    augment: str = "none"                        # "crop_flip": pad + random crop + flip of each image
    pixel_shuffle: str = "none"                  # a fixed pixel permutation of train and val images
    shuffle_patch: Optional[int] = None          # patch of the "patch" shuffle (default: model's patch_size)
    # distillation from a finished run (its hash), DeiT-style
    distill: str = "none"
    teacher: Optional[str] = None
    distill_alpha: float = 0.5                   # loss = (1-a) * task + a * distillation
    distill_tau: float = 1.0                     # soft distillation temperature
    # fine-tuning / transfer / resolution change
    init_from: Optional[str] = None              # hash of a finished run whose weights start this one
    trainable: Optional[tuple] = None            # train only params whose name contains one of these
    # bookkeeping
    seed: int = 0
    eval_every: int = 1                          # epochs; the last epoch is always evaluated
    precision: str = "fp32"
    compile: bool = False
    diverge_factor: float = 10.0                 # crash when loss > factor * first loss ...
    diverge_steps: int = 5                       # ... for this many consecutive steps (or NaN/inf)
    profile: str = "custom"
    device: str = "auto"

    def __post_init__(self):
        if self.trainable is not None:
            self.trainable = (self.trainable,) if isinstance(self.trainable, str) else tuple(self.trainable)
        for f in dataclasses.fields(self):  # ints given as floats etc.: one canonical type
            v = getattr(self, f.name)
            if "float" in str(f.type) and isinstance(v, int) and not isinstance(v, bool):
                setattr(self, f.name, float(v))
        self.validate()

    def validate(self) -> None:
        def need(ok, msg):
            if not ok:
                raise ValueError(f"bad TrainConfig: {msg}")
        need(isinstance(self.model, str) and self.model, "model must be a non-empty name")
        for f in dataclasses.fields(self):  # type first: a later range check then compares numbers
            v = getattr(self, f.name)
            if "float" in str(f.type) and not (v is None and "Optional" in str(f.type)):
                need(isinstance(v, float) and math.isfinite(v), f"{f.name} must be a finite number, got {v!r}")
        need(isinstance(self.dataset, str) and self.dataset, "dataset must be a non-empty name")
        for name in ("model_options", "dataset_options"):
            need(isinstance(getattr(self, name), dict), f"{name} must be a dict")
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("sched", self.sched, SCHEDULES)
        check_choice("distill", self.distill, DISTILL)
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("device", self.device, DEVICES)
        check_choice("augment", self.augment, AUGMENTS)
        check_choice("pixel_shuffle", self.pixel_shuffle, PIXEL_SHUFFLES)
        from ..models.registry import check_model_options  # imported late: models import torch
        check_model_options(self.model_options)
        need(self.model_options.get("img_size", self.img_size) == self.img_size,
             f"model_options img_size {self.model_options.get('img_size')} differs from img_size {self.img_size}")
        need(self.pixel_shuffle != "patch" or self.shuffle_patch or "patch_size" in self.model_options,
             "pixel_shuffle='patch' needs shuffle_patch or model_options['patch_size']")
        for name in ("img_size", "batch_size", "epochs", "eval_every", "repeated_aug", "diverge_steps"):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"{name} must be a positive int, got {v!r}")
        for name in ("train_size", "val_size", "steps", "stop_epoch", "shuffle_patch"):
            v = getattr(self, name)
            need(v is None or (isinstance(v, int) and v > 0), f"{name} must be None or a positive int, got {v!r}")
        need(self.stop_epoch is None or (self.steps is None and self.stop_epoch < self.epochs),
             f"stop_epoch must be below epochs ({self.epochs}) and given without steps, got {self.stop_epoch!r}")
        need(isinstance(self.seed, int) and self.seed >= 0, f"seed must be an int >= 0, got {self.seed!r}")
        need(self.lr > 0, f"lr must be > 0, got {self.lr}")
        for name in ("weight_decay", "warmup_epochs", "warmup_lr", "min_lr", "mixup", "cutmix", "sam_rho",
                     "momentum", "decay_rate"):
            need(getattr(self, name) >= 0, f"{name} must be >= 0, got {getattr(self, name)}")
        need(self.decay_epochs > 0, "decay_epochs must be > 0")
        need(0 <= self.label_smoothing < 1, f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        need(0 <= self.random_erasing <= 1, f"random_erasing must be in [0, 1], got {self.random_erasing}")
        need(0 <= self.distill_alpha <= 1, f"distill_alpha must be in [0, 1], got {self.distill_alpha}")
        need(self.distill_tau > 0, "distill_tau must be > 0")
        need(self.diverge_factor > 1, "diverge_factor must be > 1")
        need(self.clip_grad is None or self.clip_grad > 0, "clip_grad must be None or > 0")
        need((self.distill == "none") == (self.teacher is None),
             "distill='hard'/'soft' needs teacher=<run hash>, and a teacher needs distill='hard'/'soft'")
        need(not (self.mixup or self.cutmix) or self.batch_size % 2 == 0, "mixup/cutmix need an even batch_size")
        need(self.trainable is None or (self.trainable and all(isinstance(s, str) and s for s in self.trainable)),
             "trainable must be None or a list of non-empty name fragments")
        need(isinstance(self.compile, bool), "compile must be True or False")
        try:
            json.dumps(self.to_dict(), allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"bad TrainConfig: every value must be plain JSON ({e})") from None

    @property
    def loads(self) -> tuple[str, ...]:
        """The runs whose trained weights this run loads: its teacher, its start point (``init_from``)."""
        return tuple(h for h in (self.teacher, self.init_from) if h)

    # --- conversions ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["trainable"] = list(self.trainable) if self.trainable is not None else None
        return d

    def hashed_dict(self) -> dict:
        """What the hash covers: the fields that differ from their defaults, ``device`` and ``compile`` excepted."""
        default = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                   for f in dataclasses.fields(self) if f.name != "model"}
        return {k: v for k, v in self.to_dict().items()
                if k not in NOT_HASHED and (k not in default or v != default[k])}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        if isinstance(d, cls):
            return d
        names = [f.name for f in dataclasses.fields(cls)]
        for k in d:
            check_choice("TrainConfig field", k, names)
        return cls(**d)

    def replace(self, **changes) -> "TrainConfig":
        return TrainConfig.from_dict({**self.to_dict(), **changes})
