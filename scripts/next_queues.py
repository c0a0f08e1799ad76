"""The queues a lent GPU should train next, one file per profile (their records live in different
stores), each in the order the book needs its runs: what the notebooks still lack, collected without
training (`runqueue collect`, one notebook at a time so a notebook that stops early does not hide the
next one's runs), runs already recorded left out. Also writes results/backlog.json: each `cpu` notebook's
collected runs with their estimated cost, which the chapter pages count against the records at each build.

    python scripts/next_queues.py -o queues/          # ~10-20 min of 2-core CPU (papermill kernels)
    # on the GPU machine (README, "Training on a GPU"), one call per file, the most needed first:
    PYTHONPATH=src python -m vitmlp.runqueue train queues/cpu.json -o $OUT/cpu.tar.gz --budget 540 --parallel 14

Order of `cpu`: the appendix's SGD sweep (it decides the rate of ResMLP's SGD rows), then the ResMLP and MLP-Mixer items still made at the 3-epoch profile (the book's
provisional verdicts: issue "a reduced scale that can test the papers' claims"), cheapest item first
so that each call completes whole items, and the appendix's fp32-vs-bf16 check early; then the three
new chapters' main claims. `gpu`: the profile's calibration (scripts/gpu_profile_queue.py) first;
the main claims only once it has landed (the profile is provisional until then, and a change of it
changes every hash).
"""
import argparse
import ast
import functools
import json
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from vitmlp.calibration import gpu_profile_runs, sgd_runs
from vitmlp.profiles import get_profile
from vitmlp.records import atomic_write_json, config_hash, load_record, provenance, results_root
from vitmlp.results import BACKLOG, records_for
from vitmlp.run import NOTEBOOKS
from vitmlp.runqueue import collect, read_queue, write_queue
from vitmlp.train import TrainConfig

CPU = ["resmlp/table3_ablations",
       "mlp-mixer/figure7_stem_filters", "resmlp/figure3+figureB2_sparsity",
       "mlp-mixer/appendixA1_untied", "mlp-mixer/figure4_shuffling", "resmlp/table4_transfer",
       "mlp-mixer/figure2_data_size", "resmlp/tableD1+tableD2_training", "resmlp/appendixA_exploration",
       "mlp-mixer/appendixC_finetune",
       # the precision check: fp32 twins of the baselines, whether bf16-trained records stand for fp32
       # ones; after the chapters' items, since a twin trained on a GPU adds the device to the comparison
       "appendix/dataset",
       # the new chapters' main claims (issues 16-18), then the rest of their items
       "three-things-vit/table1_baselines", "scaled-relu/table1_stability", "dual-patchnorm/table4_ablations",
       "three-things-vit/table2_layerscale", "three-things-vit/figure1+figure2+figure3_parallel",
       "dual-patchnorm/figure1+table1_placements"]
# analysis notebooks whose runs are all recorded: collected for the weights they read (weights.json)
ANALYSIS = ["mlp-mixer/figure5+figure6_token_mixing", "resmlp/figure2+figureB1_cross_patch", "mlp-mixer/table3_scratch"]
# the new chapters' other training items, collected once their main claims are queued
CPU_REST = ["three-things-vit/table3_top1", "three-things-vit/table7+figure6_stems",
            "three-things-vit/table5_resolution_finetune", "three-things-vit/table6_transfer",
            "scaled-relu/table2+table3+table5_stem_variants", "scaled-relu/table7+text_data_fraction",
            "scaled-relu/figure1_token_similarity", "dual-patchnorm/figure2_first_norm_scales",
            "dual-patchnorm/figure3_gradient_norms"]
GPU_MAIN = ["three-things-vit/figure1+figure2+figure3_parallel", "scaled-relu/table1_stability",
            "dual-patchnorm/figure1+table1_placements", "resmlp/table3_ablations", "mlp-mixer/table3_scratch"]


# Training rate of the AVX2 kind of 2-core CPU in forward multiply-adds per second (two runs at once,
# fp32: results/appendix/bench-avx2.csv, ViT-S 13.6 M x 492 img/s, ResMLP-S12 8.4 M x 1075, Mixer-S/16
# 9.8 M x 1087); other families at the ViT rate, the slowest. An estimate for planning, not a bound: small
# models, evaluation and a slower CPU generation run slower than their MACs say, so the book scales it by
# what recorded runs took against it (vitmlp.book.estimate_pace).
MACS_PER_S = {"vit": 6.7e9, "resmlp": 9.0e9, "mixer": 10.7e9}
RUNS_PER_GPU_CALL = 35   # session 13: 33 cpu-profile runs in one 10-minute call of an H200, 14 at once


@functools.cache
def _macs(model: str, options: str, img_size: int) -> int:
    """Forward multiply-adds per image of a model (options as a repr of their sorted items)."""
    from vitmlp.measure import count_macs
    from vitmlp.models import create_model
    return count_macs(create_model(model, **{**dict(ast.literal_eval(options)), "num_classes": 10}), img_size)


@functools.cache
def _train_images(dataset: str, options: str, img_size: int) -> int:
    from vitmlp.data import build_dataset
    return len(build_dataset(dataset, "train", img_size, **dict(ast.literal_eval(options))))


def cpu_hours(cfgs) -> float:
    """Estimated 2-core hours (AVX2 kind) to train ``cfgs``: forward MACs x images / the
    family's rate, twice for SAM (each step a second forward-backward at the perturbed weights)."""
    total = 0.0
    for c in cfgs:
        n = c.train_size or _train_images(c.dataset, repr(sorted(c.dataset_options.items())), c.img_size)
        images = c.steps * c.batch_size if c.steps else (c.stop_epoch or c.epochs) * (n // c.batch_size) * c.batch_size
        macs = _macs(c.model, repr(sorted(c.model_options.items())), c.img_size)
        passes = 2 if c.sam_rho else 1
        total += passes * macs * images / MACS_PER_S.get(c.model.split("_")[0], MACS_PER_S["vit"])
    return total / 3600


def run_hours(c) -> float:
    """One run's estimate as the backlog keeps it."""
    return round(cpu_hours([c]), 3)


def missing(profile: str, notebooks: list[str], first=(), log=None) -> tuple[list, set, set]:
    """Configs the notebooks would train at ``profile`` that have no record, in notebook order, once
    each; those of them whose weights a later analysis reads (the archive brings them home); and the
    recorded runs whose weights an analysis reads but this machine's cache lacks (a queue trains
    them again). Prints each notebook's count and, at ``cpu``, its estimated cost. ``log``: a dict
    that gets each notebook's collected runs (hash -> estimated hours) and whether its collect ended."""
    weights, seen = set(), set()
    store = records_for(profile)
    todo = []

    def add(new):
        kept = []
        for c in new:
            h = config_hash(c)
            if h not in seen and load_record(h, store) is None:
                seen.add(h)
                kept.append(c)
        todo.extend(kept)
        return kept
    add(first)
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(notebooks):
            out = Path(tmp) / f"{i}.json"
            stop = collect([NOTEBOOKS / f'{name}.ipynb'], {'profile': profile}, out)
            got, needed = read_queue(out)
            kept = add(got)
            weights |= needed
            why = next(iter(stop.values()))   # "complete", or where and why the collect stopped
            if log is not None:
                log[name] = {"complete": why == "complete",
                             "runs": {config_hash(c): run_hours(c) for c in got}}
            cost = (f", an estimated {cpu_hours(kept):.0f} h of 2 AVX2 cores or {len(kept) / RUNS_PER_GPU_CALL:.1f} "
                    "10-minute GPU calls" if profile == "cpu" and kept else "")
            print(f"{profile} {name}: {len(kept)} new runs{cost} ({why[:120]})", flush=True)
    return todo, weights & seen, weights - seen


HOURS = ("an estimate: forward multiply-adds x images (twice with SAM) at the 2-core AVX2 kind's rate "
         "(MACS_PER_S), which the book scales by what recorded runs took against it")


def recost(queue: Path) -> dict:
    """The backlog's hours estimated again (after a change of ``cpu_hours``) without collecting: each run's
    config from ``queue`` (the runs still to train) or from its record."""
    backlog = json.loads((results_root() / BACKLOG).read_text())
    store = records_for(backlog["profile"])
    known = {config_hash(c): c for c in read_queue(queue)[0]}
    for nb in backlog["notebooks"].values():
        for h in nb["runs"]:
            if h not in known:
                rec = load_record(h, store)
                if rec is None:
                    raise SystemExit(f"{h}: neither in {queue} nor recorded; collect again (no --recost)")
                known[h] = TrainConfig.from_dict(rec["config"])
            nb["runs"][h] = run_hours(known[h])
    return {**backlog, **provenance(), "costed": datetime.now(timezone.utc).isoformat(timespec="seconds"), "hours": HOURS}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="queues")
    ap.add_argument("--recost", action="store_true",
                    help="only estimate the backlog's hours again, from the queue in --out and the records")
    a = ap.parse_args()
    out = Path(a.out)
    if a.recost:
        print("backlog ->", atomic_write_json(results_root() / BACKLOG, recost(out / "cpu.json")))
        raise SystemExit
    out.mkdir(parents=True, exist_ok=True)
    # cpu first: the SGD sweep that decides the learning rate of ResMLP's SGD rows (Tables 3 and D.1)
    for profile, notebooks, first in (("cpu", CPU + ANALYSIS + CPU_REST, [c for _, c in sgd_runs("cpu")]),
                                      ("gpu", [] if get_profile("gpu").provisional else GPU_MAIN, [c for _, c in gpu_profile_runs()])):
        log = {} if profile == "cpu" else None
        cfgs, weights, recorded = missing(profile, notebooks, first, log)
        if log is not None:   # the chapter pages' "still to train" (vitmlp.book.to_train)
            print("backlog ->", atomic_write_json(results_root() / BACKLOG, {
                "profile": profile, "collected": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **provenance(), "hours": HOURS, "notebooks": log}))
        cost = f", an estimated {cpu_hours(cfgs):.0f} h of 2 AVX2 cores" if profile == "cpu" and cfgs else ""
        print(f"{profile}: {len(cfgs)} runs{cost} ->", write_queue(out / f"{profile}.json", cfgs, weights))
        if profile == "cpu":   # a queue of its own: in cpu.json these rebuilds would wait behind every new run
            recs = [load_record(h, records_for(profile)) for h in sorted(recorded)]
            again = [TrainConfig.from_dict(r["config"]) for r in recs if r is not None]
            print(f"{profile}: {len(again)} recorded runs' weights to rebuild ->",
                  write_queue(out / "weights.json", again, recorded))
