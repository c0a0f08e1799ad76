"""The calibration sweep behind the ``cpu`` profile (book appendix, "Convergence and cost").

The reference baselines (ViT-S, ResMLP-S12, Mixer-S/16, a bag of patches, and a ResNet-18 beside
them) trained for schedules of several lengths at a profile's scale with its width, learning rate
or task difficulty changed: top-1 against the length of the schedule says where a model reaches its
plateau, and images per run over a CPU's images/s says what that costs.

    cfgs = sweep("cpu", epochs=(24, 48), widths=(0.125,), lr=2e-3)

Every config is the profile's own config with those fields changed, so the point chosen as the
profile is the same cached run.
"""
from __future__ import annotations

from dataclasses import dataclass

from .data.loaders import OPTIONS
from .profiles import NO_VIT_OPTIONS, get_profile, resnet_recipe, run_config, sgd_recipe

# (label, model, options): the appendix's reference baselines
BASELINES = [("ViT-S", "vit_S", {}), ("ResMLP-S12", "resmlp_S12", {}), ("Mixer-S/16", "mixer_S16", {}),
             ("bag of patches", "resmlp_S12", {"cross_patch": "none"})]
CONVNET = ("ResNet-18", "timm:resnet18", dict(NO_VIT_OPTIONS))


def sweep(profile: str, epochs=(3, 6, 12, 24, 48), widths=(0.25, 0.125), seeds=(0, 1), convnet: bool = True,
          **overrides) -> list[tuple[str, object]]:
    """(label, config) of every baseline x width x schedule x seed, shortest schedules first (they
    finish first within a GPU call's time budget). ``overrides``: TrainConfig fields (``lr=``,
    ``dataset_options=``, ...). The ResNet takes no width."""
    out = []
    for e in epochs:
        for s in seeds:
            for w in widths:
                out += [(label, run_config(profile, m, model_options={**o, "width_mult": w}, epochs=e, seed=s,
                                           **overrides)) for label, m, o in BASELINES]
            if convnet:
                label, m, o = CONVNET
                out.append((label, run_config(profile, m, model_options=o, epochs=e, seed=s, **overrides)))
    return out


@dataclass(frozen=True)
class Candidate:
    """A candidate profile: learning rate, 1x schedule (epochs; 2x is its double), task difficulty."""
    lr: float
    epochs: int
    difficulty: float

    @property
    def label(self) -> str:
        return f"lr {self.lr:g}, {self.epochs} ep, difficulty {self.difficulty:g}"


def profile_point(profile: str) -> Candidate:
    """The candidate a profile is: its learning rate, schedule and task difficulty."""
    P = get_profile(profile)
    return Candidate(P.recipe["lr"], P.epochs, P.dataset_options.get("difficulty", OPTIONS[P.dataset]["difficulty"]))


def candidates(specs) -> list[Candidate]:
    """``[[lr, epochs, difficulty], ...]`` as Candidates; anything else is refused with an example."""
    try:
        out = [Candidate(float(lr), e, float(d)) for lr, e, d in specs]
        ok = out and all(c.lr > 0 and isinstance(c.epochs, int) and c.epochs > 0 and 0 <= c.difficulty <= 1
                         for c in out)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError("candidates must be [lr > 0, epochs (int > 0), difficulty in [0, 1]] triples, "
                         f"e.g. [[4e-3, 48, 0.8]]; got {specs!r}")
    return out


def candidate_runs(profile: str, cand: Candidate, width: float, seeds=(0, 1, 2)) -> list[tuple[str, object]]:
    """(label, config) of every baseline at the candidate's 1x and 2x schedules. The data set's default
    difficulty is left out of the config, so a candidate at it is the same cached run as a sweep's run."""
    default = OPTIONS["embedded"]["difficulty"]
    data = {} if cand.difficulty == default else {"dataset_options": {"difficulty": cand.difficulty}}
    return sweep(profile, (cand.epochs, 2 * cand.epochs), widths=(width,), seeds=seeds, lr=cand.lr,
                 precision="auto", **data)


# The gpu profile's second calibration call: its first (H200, lr 4e-3) left ViT-S at 11-25 % (loss near
# 2.30) and split Mixer-S/16's seeds between 70 and 93 %, where ResMLP-S12 agreed within 1.5 points; 3 seeds
# per rate, since a split shows only across seeds (at the cpu scale Mixer's std was 4-5 points at difficulty 0.8
# at lr 2e-3 and 4e-3 alike)
GPU_LRS = (1e-3, 2e-3)


def gpu_profile_runs(lrs=GPU_LRS, lr_seeds=(0, 1, 2)) -> list[tuple[str, object]]:
    """(label, config) of the ``gpu`` profile's calibration, in the order a GPU call should train what
    is missing: the three baselines at the lower learning rates ``lrs`` on ``lr_seeds``; the profile's
    own point on its seeds (their spread gives the minimal detectable effect) with the bag of patches
    on seed 0 (the floor a patch-mixing model must clear); each baseline at twice the epochs on seed 0
    (the doubling check of the plateau)."""
    P = get_profile("gpu")

    def at(epochs, seeds, bag=(), **kw):   # the three baselines, the bag of patches only on the seeds ``bag``
        runs = sweep("gpu", (epochs,), widths=(P.width_mult,), seeds=seeds, convnet=False, **kw)
        return [(label, c) for label, c in runs if label != "bag of patches" or c.seed in bag]
    return [*(r for lr in lrs for r in at(P.epochs, lr_seeds, lr=lr)),
            *at(P.epochs, tuple(range(P.n_seeds)), bag=(0,)), *at(2 * P.epochs, (0,))]


# ResMLP's Tables 3 and D.1 train with SGD. ResNet's rule (lr 0.1 x batch/256) left reduced ResMLP-S12
# near chance for most of the cpu run: the profile's AdamW rate was calibrated for this scale, so SGD's
# is swept the same way, and profiles.SGD_LR_SCALE takes the sweep's choice
SGD_FACTORS = (1, 2, 4, 8)


def sgd_runs(profile: str, factors=SGD_FACTORS, seeds=(0, 1)) -> list[tuple[str, object]]:
    """(label, config) of reduced ResMLP-S12 at the profile's recipe with AdamW swapped for ResNet's SGD
    (momentum 0.9, weight decay 1e-4) at ``factors`` times ResNet's learning rate."""
    sgd = sgd_recipe(get_profile(profile).batch_size)
    return [(f"SGD lr {f * sgd['lr']:g} (x{f:g} ResNet's rule)",
             run_config(profile, "resmlp_S12", seed=s, **{**sgd, "lr": f * sgd["lr"]}))
            for s in seeds for f in factors]   # seed by seed: an interrupted queue has swept every rate once


def resnet_warmup_runs(profile: str, seeds=(0, 1, 2)) -> list[tuple[str, object]]:
    """(label, config) of ResMLP Table 3's "old-fashioned" run (:func:`profiles.resnet_recipe`, the same
    cached runs) beside the same recipe without its warm-up, as ResNet trains at its own rate."""
    old = resnet_recipe(profile)
    return [(f"ResNet recipe, lr {old['lr']:g}" + (f", {w:g}-epoch warm-up" if w else ", no warm-up"),
             run_config(profile, "resmlp_S12", seed=s, **{**old, "warmup_epochs": w}))
            for w in sorted({0.0, old["warmup_epochs"]}) for s in seeds]
