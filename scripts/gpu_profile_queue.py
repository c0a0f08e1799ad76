"""The calibration queue of the `gpu` profile (vitmlp.profiles; vitmlp.calibration.gpu_profile_runs):
ViT-S, ResMLP-S12 and Mixer-S/16 at lower learning rates on 3 seeds (the first call, at the profile's
4e-3, left ViT-S untrained and Mixer's seeds split), at the profile's own point over its 5 seeds (their spread
gives the minimal detectable effect) with the bag of patches on seed 0, and each baseline at twice
the epochs on seed 0 (the plateau check). The appendix ("Convergence and cost") reads what is
recorded. Then the main claims can be queued at `gpu` (`python -m vitmlp.runqueue collect --profile gpu ...`).

    python scripts/gpu_profile_queue.py -o queue.json
    # on the GPU machine (README, "Training on a GPU"): runs of 1.5M (2x: 3M) images, ~4-6 min each at 16 at once
    PYTHONPATH=src python -m vitmlp.runqueue train queue.json -o runs.tar.gz --budget 540 --parallel 16
"""
import argparse

from vitmlp.calibration import gpu_profile_runs
from vitmlp.results import records_for
from vitmlp.records import config_hash, load_record
from vitmlp.runqueue import write_queue

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="queue.json")
    a = ap.parse_args()
    todo = [c for _, c in gpu_profile_runs() if load_record(config_hash(c), records_for("gpu")) is None]
    print(f"{len(todo)} runs without a record ->", write_queue(a.out, todo))
