"""The calibration sweep behind the `cpu` profile (book appendix, "Convergence"): the reference
baselines at two widths, for schedules of 3 to 48 epochs of the embedded data, 2 seeds.

    python scripts/calibration_queue.py -o .gpu/sweep.json      # then: python -m vitmlp.runqueue train ...

Every config is a `cpu`-profile config with its schedule and width changed, so the point that
becomes the profile is the same cached run.
"""
import argparse

from vitmlp.experiment import NO_VIT_OPTIONS
from vitmlp.profiles import run_config
from vitmlp.runqueue import write_queue

BASELINES = [("vit_S", {}), ("resmlp_S12", {}), ("mixer_S16", {}), ("resmlp_S12", {"cross_patch": "none"})]


def sweep(epochs=(3, 6, 12, 24, 48), widths=(0.25, 0.125), seeds=(0, 1), **overrides):
    out = []
    for e in epochs:          # short schedules first: they finish first within a time budget
        for s in seeds:
            for w in widths:
                out += [run_config("cpu", m, model_options={**o, "width_mult": w}, epochs=e, seed=s, **overrides)
                        for m, o in BASELINES]
            out.append(run_config("cpu", "timm:resnet18", model_options=dict(NO_VIT_OPTIONS), epochs=e, seed=s,
                                  **overrides))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    # width x1/8 is what 2 cores can afford; x1/4 only at the short schedules, to see what width buys
    harder = lambda d: {"dataset_options": {"difficulty": d}}  # noqa: E731
    cfgs = (sweep((48,), widths=(0.125,), precision="auto", lr=2e-3, **harder(0.7))
            + sweep((48,), widths=(0.125,), precision="auto", lr=2e-3)
            + sweep((24,), widths=(0.125,), seeds=(0, 1, 2), precision="auto", lr=2e-3, **harder(0.7))
            + sweep((24,), widths=(0.125,), precision="auto", lr=2e-3, **harder(0.6))
            + sweep((3, 6, 12, 24), widths=(0.125,), precision="auto")
            + sweep((48,), widths=(0.125,), precision="auto")
            + sweep((6, 12, 24), widths=(0.125,), precision="auto", lr=2e-3)
            + sweep((3, 6, 12), widths=(0.25,), precision="auto"))
    print(write_queue(a.out, cfgs), len(cfgs), "runs")
