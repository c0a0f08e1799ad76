"""The queue of the calibration sweep (vitmlp.calibration) that ran on a lent H100 in session 6,
and what is still to train (runs already recorded are skipped by `runqueue train`): `python scripts/calibration_queue.py -o queue.json`, then
`python -m vitmlp.runqueue train queue.json` on a GPU machine (README, "Training on a GPU").

`--cpu` writes the short queue to train next in the background on 2 CPU cores, most informative first
(`python -m vitmlp.runqueue train q.json -o /tmp/cal.tar.gz --budget <seconds> --parallel 2`; records land in
results/runs, an unfinished run resumes from its checkpoint in the next call on the same machine).
"""
import argparse

from vitmlp.calibration import sweep
from vitmlp.runqueue import write_queue


def queue():
    auto = dict(precision="auto")
    harder = lambda d: {"dataset_options": {"difficulty": d}}  # noqa: E731
    return [c for _, c in
            sweep("cpu", (3, 6, 12, 24, 48), widths=(0.125,), **auto)            # width x1/8: what 2 cores afford
            + sweep("cpu", (6, 12, 24), widths=(0.125,), lr=2e-3, **auto)
            + sweep("cpu", (3, 6, 12), widths=(0.25,), **auto)                   # width x1/4: what width buys
            # still to train (a call of session 6 returned nothing): the doubling at lr 2e-3, a harder task
            + sweep("cpu", (48,), widths=(0.125,), convnet=False, lr=2e-3, **auto)
            + sweep("cpu", (24, 48), widths=(0.125,), seeds=(0, 1, 2), lr=2e-3, **auto, **harder(0.7))
            # session 8's candidate: lr 4e-3, 48 epochs (1x) and 96 (2x), 3 seeds, with the ResNet beside
            + sweep("cpu", (48, 96), widths=(0.125,), seeds=(0, 1, 2), lr=4e-3, **auto, **harder(0.7))
            # ResMLP-S12 reached 94.9 % at 96 epochs there (above the 92 % ceiling): the same at a harder task
            + sweep("cpu", (48, 96), widths=(0.125,), seeds=(0, 1, 2), lr=4e-3, **auto, **harder(0.8))
            # session 9: Mixer's seeds spread 76.6-86.2 % at lr 4e-3 there (ResMLP 86.2-87.3): Mixer at lr 2e-3
            + sweep("cpu", (48, 96), widths=(0.125,), seeds=(0, 1, 2), lr=2e-3, **auto, **harder(0.8))]


def cpu_next():
    """Difficulty 0.8, 48 epochs: Mixer at lr 2e-3 (does its seed spread shrink?), then ViT-S and the bag of
    patches at lr 4e-3 (not measured at 0.8 yet), then their other seeds."""
    auto, harder = dict(precision="auto"), {"dataset_options": {"difficulty": 0.8}}
    pick = lambda labels, seeds, lr: [c for l, c in sweep("cpu", (48,), widths=(0.125,), seeds=seeds, convnet=False,  # noqa: E731
                                                          lr=lr, **auto, **harder) if l in labels]
    return (pick({"Mixer-S/16"}, (0, 1, 2), 2e-3) + pick({"ViT-S", "bag of patches"}, (0,), 4e-3)
            + pick({"ViT-S", "bag of patches"}, (1, 2), 4e-3))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--cpu", action="store_true", help="the short queue to train next on 2 CPU cores")
    a = ap.parse_args()
    cfgs = cpu_next() if a.cpu else queue()
    print(write_queue(a.out, cfgs), len(cfgs), "runs")
