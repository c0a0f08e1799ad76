"""The queues a lent GPU should train next, one file per profile (their records live in different
stores), each in the order the book needs its runs: what the notebooks still lack, collected without
training (`runqueue collect`, one notebook at a time so a notebook that stops early does not hide the
next one's runs), runs already recorded left out.

    python scripts/next_queues.py -o queues/          # ~10-20 min of 2-core CPU (papermill kernels)
    # on the GPU machine (README, "Training on a GPU"), one call per file, the most needed first:
    PYTHONPATH=src python -m vitmlp.runqueue train queues/cpu.json -o $OUT/cpu.tar.gz --budget 540 --parallel 14

Order of `cpu`: the ResMLP and MLP-Mixer items still made at the 3-epoch profile (the book's
provisional verdicts: issue "a reduced scale that can test the papers' claims"), cheapest item first
so that each call completes whole items, and the appendix's fp32-vs-bf16 check early; then the three
new chapters' main claims. `gpu`: the profile's calibration (scripts/gpu_profile_queue.py) first;
the main claims only once it has landed (the profile is provisional until then, and a change of it
changes every hash).
"""
import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from gpu_profile_queue import queue as gpu_calibration  # noqa: E402
from vitmlp.profiles import get_profile  # noqa: E402
from vitmlp.records import config_hash, load_record  # noqa: E402
from vitmlp.results import records_for  # noqa: E402
from vitmlp.run import NOTEBOOKS  # noqa: E402
from vitmlp.runqueue import collect, read_queue, write_queue  # noqa: E402

CPU = ["resmlp/table3_ablations",
       # the precision check: fp32 twins of the baselines, whether bf16-trained records stand for fp32 ones
       "appendix/dataset",
       "mlp-mixer/figure7_stem_filters", "resmlp/figure3+figureB2_sparsity",
       "mlp-mixer/appendixA1_untied", "mlp-mixer/figure4_shuffling", "resmlp/table4_transfer",
       "mlp-mixer/figure2_data_size", "resmlp/tableD1+tableD2_training", "resmlp/appendixA_exploration",
       "mlp-mixer/appendixC_finetune",
       # the new chapters' main claims (issues 16-18), then the rest of their items
       "three-things-vit/table1_baselines", "scaled-relu/table1_stability", "dual-patchnorm/table4_ablations",
       "three-things-vit/table2_layerscale", "three-things-vit/figure1+figure2+figure3_parallel",
       "dual-patchnorm/figure1+table1_placements"]
GPU_MAIN = ["three-things-vit/figure1+figure2+figure3_parallel", "scaled-relu/table1_stability",
            "dual-patchnorm/figure1+table1_placements", "resmlp/table3_ablations", "mlp-mixer/table3_scratch"]


def missing(profile: str, notebooks: list[str], first=()) -> tuple[list, set]:
    """Configs the notebooks would train at ``profile`` that have no record, in notebook order, once
    each, and those of them whose weights a later analysis reads (the archive brings them home)."""
    cfgs, weights, seen = [], set(), set()
    store = records_for(profile)
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(notebooks):
            out = Path(tmp) / f"{i}.json"
            print(f"{profile} {name}: {collect([NOTEBOOKS / f'{name}.ipynb'], {'profile': profile}, out)}", flush=True)
            got, needed = read_queue(out)
            cfgs, weights = cfgs + got, weights | needed
    todo = []
    for c in list(first) + cfgs:
        h = config_hash(c)
        if h not in seen and load_record(h, store) is None:
            seen.add(h)
            todo.append(c)
    return todo, weights & seen


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="queues")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for profile, notebooks, first in (("cpu", CPU, ()),
                                      ("gpu", [] if get_profile("gpu").provisional else GPU_MAIN, gpu_calibration())):
        cfgs, weights = missing(profile, notebooks, first)
        print(f"{profile}: {len(cfgs)} runs ->", write_queue(out / f"{profile}.json", cfgs, weights))
