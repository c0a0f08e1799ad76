"""The calibration queue of the `gpu` profile (vitmlp.profiles): ViT-S, ResMLP-S12 and Mixer-S/16 at the
profile's schedule and width over its 5 seeds (their spread gives the minimal detectable effect; the
plateau is read from the validation curves each record keeps), and the bag of patches on one seed (the
floor a patch-mixing model must clear): 16 runs, one wave of a 10-minute call. Then the main claims can
be queued at `gpu` (`python -m vitmlp.runqueue collect --profile gpu ...`).

    python scripts/gpu_profile_queue.py -o queue.json
    # on the GPU machine (README, "Training on a GPU"): 16 runs of 1.5M images at once
    PYTHONPATH=src python -m vitmlp.runqueue train queue.json -o runs.tar.gz --budget 540 --parallel 16
"""
import argparse

from vitmlp.calibration import sweep
from vitmlp.profiles import get_profile
from vitmlp.runqueue import write_queue


def queue():
    P = get_profile("gpu")
    runs = sweep("gpu", (P.epochs,), widths=(P.width_mult,), seeds=tuple(range(P.n_seeds)), convnet=False)
    return [c for label, c in runs if label != "bag of patches" or c.seed == 0]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="queue.json")
    a = ap.parse_args()
    print(f"{len(queue())} runs ->", write_queue(a.out, queue()))
