"""The calibration queue of the `gpu` profile (vitmlp.profiles): ViT-S, ResMLP-S12 and Mixer-S/16 at the
profile's schedule and width over its 5 seeds (their spread gives the minimal detectable effect), the bag
of patches on one seed (the floor a patch-mixing model must clear), and the doubling check the profile
rule asks for, each baseline at twice the epochs on seed 0 (its gain over the 1x runs says whether 48
epochs reach the plateau; the calibration sweep at the cpu scale found difficulty 0.8 still gaining 5-8
points from 48 to 96 epochs). 19 runs, the three 2x runs first (the longest: with 16 at once they may need a
second call, `--resume`). Then the main claims can be queued at `gpu`
(`python -m vitmlp.runqueue collect --profile gpu ...`).

    python scripts/gpu_profile_queue.py -o queue.json
    # on the GPU machine (README, "Training on a GPU"): 19 runs of 1.5M (2x: 3M) images
    PYTHONPATH=src python -m vitmlp.runqueue train queue.json -o runs.tar.gz --budget 540 --parallel 16
"""
import argparse

from vitmlp.calibration import sweep
from vitmlp.profiles import get_profile
from vitmlp.runqueue import write_queue


def queue():
    P = get_profile("gpu")
    doubled = sweep("gpu", (2 * P.epochs,), widths=(P.width_mult,), seeds=(0,), convnet=False)
    runs = sweep("gpu", (P.epochs,), widths=(P.width_mult,), seeds=tuple(range(P.n_seeds)), convnet=False)
    return ([c for label, c in doubled if label != "bag of patches"]
            + [c for label, c in runs if label != "bag of patches" or c.seed == 0])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="queue.json")
    a = ap.parse_args()
    print(f"{len(queue())} runs ->", write_queue(a.out, queue()))
