"""What a reduced-profile notebook does: plan the runs of a table, train them (cached), and
summarise them over seeds.

    arms = [Arm("ViT", "vit_S"), Arm("bag of patches", "resmlp_S12", {"cross_patch": "none"})]
    runs = plan("cpu", arms)        # validates everything first: nothing is trained on a bad name
    df = run(runs)                  # one row per (arm, seed); cached runs are not retrained
    summary(df)                     # mean, std, n per arm

How a difference becomes a verdict (intervals, equivalence, "did not train", Holm): :mod:`vitmlp.stats`.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import pandas as pd
import torch
from tqdm.auto import tqdm

from . import runqueue, stats
from .data import DATASETS
from .models import check_choice, create_model
from .profiles import get_profile, run_config, train_images
from .profiles import seeds as seeds_of
from .records import config_hash, load_record
from .train import TrainConfig, train
from .train.state import request_stop


@dataclass
class Arm:
    """One row of an experiment table: a label, a model and what differs from the profile."""
    label: str
    model: str
    model_options: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)     # TrainConfig fields, e.g. lr=, sam_rho=, dataset=
    dataset_options: dict = field(default_factory=dict)


# Options a profile gives every model (vitmlp.profiles.run_config) that a timm convnet does not take.
NO_VIT_OPTIONS = {"patch_size": None, "width_mult": None, "depth_mult": None, "img_size": None}


def convnet_teacher(profile: str, epochs_factor: int = 3) -> Arm:
    """The convnet that DeiT-style distillation learns from (the papers use RegNetY-16GF): a
    ResNet-18 from timm at the profile's resolution (37 M multiply-adds at 32 px, as much as a
    reduced ResMLP-S12), trained ``epochs_factor`` times longer than the students."""
    return Arm("convnet teacher (ResNet-18)", "timm:resnet18", dict(NO_VIT_OPTIONS),
               {"epochs": get_profile(profile).epochs * epochs_factor})


def paper_steps(profile: str, epochs: float, of: float = 400) -> int:
    """Updates that stand for ``epochs`` of a paper that trains ``of`` epochs: the same fraction
    of the profile's run (at least one)."""
    p = get_profile(profile)
    return max(1, round(p.epochs * (train_images(profile) // p.batch_size) * epochs / of))


def sgd_recipe(batch: int) -> dict:
    """ResNet's optimiser: SGD with momentum, lr 0.1 x batch/256, weight decay 1e-4."""
    return dict(optimizer="momentum", lr=0.1 * batch / 256, weight_decay=1e-4)


def resnet_recipe(profile: str, epochs: float = 90, of: float = 400) -> dict:
    """TrainConfig overrides for the "old-fashioned" ResNet-50 recipe at the profile's scale: SGD,
    no label smoothing, no warm-up, the lr divided by 10 every third of training, and ``epochs``
    of the paper's ``of`` as a fraction of the profile's updates (ResMLP Tables 3 and D.1)."""
    p, steps = get_profile(profile), paper_steps(profile, epochs, of)
    return dict(batch_size=p.batch_size, **sgd_recipe(p.batch_size), label_smoothing=0.0, warmup_epochs=0.0,
                sched="step", decay_epochs=steps / 3 / (train_images(profile) // p.batch_size), decay_rate=0.1,
                steps=steps)


def plan(profile: str, arms: list[Arm], seeds=None) -> list[tuple[str, TrainConfig]]:
    """(label, config) for every arm and seed. Fails before anything runs on an unknown profile,
    model, option or data set, or a negative count."""
    get_profile(profile)
    if len({a.label for a in arms}) != len(arms):
        raise ValueError("arm labels must be unique")
    out = []
    for arm in arms:
        for s in seeds_of(profile, seeds):
            cfg = run_config(profile, arm.model, model_options=arm.model_options,
                             dataset_options=arm.dataset_options, seed=s, **arm.overrides)
            check_choice("dataset", cfg.dataset, DATASETS)
            out.append((arm.label, cfg))
        with torch.device("meta"):  # builds the model to check name and options, allocates nothing
            create_model(cfg.model, **cfg.model_options)
    return out


def run(runs: list[tuple[str, TrainConfig]], *, parallel: int | None = None, missing: str = "train",
        **train_kwargs) -> pd.DataFrame:
    """Train every planned run (skipping recorded ones); one row per run, in the order given.

    parallel: runs trained at once, each in its own process with its share of the cores (None: the
    profile's ``parallel_runs``; on 2 CPU cores two 1-thread runs train 0.85-1.8x the images/s of one
    2-thread run, see the appendix; they also overlap each run's set-up and evaluation). A run
    waits for the runs it needs (its ``teacher``, its ``init_from``) when they are in the list.
    missing="skip": train nothing; a run without a record gets status ``missing`` (counted aloud),
    for sweeps sized for a GPU (``python -m vitmlp.runqueue``) read on a laptop.
    """
    check_choice("missing", missing, ("train", "skip"))
    parallel = parallel or (get_profile(runs[0][1].profile).parallel_runs if runs else 1)
    collect = runqueue.collecting()  # `python -m vitmlp.runqueue collect`: note the runs, train nothing
    if collect or missing == "skip":
        if collect:
            runqueue.note([cfg for _, cfg in runs])
        status = "queued" if collect else "missing"
        recs = [load_record(config_hash(cfg), train_kwargs.get("records")) or {"status": status} for _, cfg in runs]
        n = sum(r["status"] == "missing" for r in recs)
        if n:
            print(f"{n} of {len(runs)} runs have no record and were not trained (missing='skip'); "
                  "train them with `python -m vitmlp.runqueue` (README) or missing='train'")
    elif parallel == 1:
        recs = [train(cfg, **train_kwargs) for _, cfg in tqdm(runs, desc="runs", unit="run")]
    else:
        recs = run_pool([cfg for _, cfg in runs], parallel, train_kwargs)
    rows = []
    for (label, cfg), rec in zip(runs, recs):
        m, machine = rec.get("metrics", {}), rec.get("machine", {})
        rows.append({"label": label, "seed": cfg.seed, "hash": config_hash(cfg), "status": rec["status"],
                     "num_classes": rec.get("num_classes"),
                     "final_top1": m.get("final_top1", math.nan), "best_top1": m.get("best_top1", math.nan),
                     "train_loss": m.get("final_train_loss", math.nan),
                     "crash_step": (rec.get("crash") or {}).get("step"),
                     "images_per_s": rec.get("images_per_s"), "wall_time_s": rec.get("wall_time_s"),
                     "threads": machine.get("torch_threads"), "cores": machine.get("cores"),
                     "curves": rec.get("curves", {})})
    return pd.DataFrame(rows)


def training_time(*dfs: pd.DataFrame) -> str:
    """The training time of the runs in ``dfs`` (rows of :func:`run`), read from their records, so a
    re-run that finds them cached states the same time. A run that used t of its machine's c cores
    counts t/c of its wall time, since c/t such runs trained at once."""
    runs = pd.concat(dfs).drop_duplicates("hash")
    minutes = (runs.wall_time_s * runs.threads / runs.cores).sum() / 60
    cores = "/".join(str(c) for c in sorted(runs.cores.unique()))
    return (f"Training time {minutes:.0f} min on {cores} cores ({len(runs)} runs, from their records; "
            "cached runs are not retrained)")


def wall_time(start: float) -> str:
    """This notebook's own wall time since ``start`` (a ``time.time()``): what it computes beyond
    the training runs that :func:`training_time` states."""
    s = time.time() - start
    took = f"{s / 60:.1f} min" if s >= 120 else f"{s:.0f} s"
    return f"Notebook wall time {took} on {os.cpu_count()} cores"


_busy = threading.Event()  # in a worker: a run is under way


def _worker_init(threads: int, parent: int) -> None:
    os.environ["VITMLP_PROGRESS"] = "0"   # one bar, the parent's, over runs
    signal.signal(signal.SIGTERM, request_stop)  # between runs; the trainer takes SIGTERM while it runs
    torch.set_num_threads(threads)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """A worker whose parent is gone (killed, even with SIGKILL) stops its run as on SIGTERM (a
    checkpoint after the step under way) and exits, instead of training on and waiting forever."""
    while os.getppid() == parent:
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.time() + STOP_GRACE_S
    while _busy.is_set() and time.time() < deadline:
        time.sleep(0.2)
    os._exit(1)


def _train_in_worker(cfg, **train_kwargs) -> dict:
    _busy.set()
    try:
        return train(cfg, **train_kwargs)
    finally:
        _busy.clear()


def worker_pool(n: int) -> ProcessPoolExecutor:
    """``n`` fresh (spawned) processes sharing this process's threads, without progress bars; they
    exit when this process dies."""
    return ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init,
                               initargs=(max(1, torch.get_num_threads() // n), os.getpid()))


class _ForwardStop:
    """In the parent, SIGTERM asks the workers' runs to stop (each saves a checkpoint), then
    raises KeyboardInterrupt here, so the pool winds down instead of leaving its workers behind."""

    def __init__(self, pool):
        self.pool, self.old = pool, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, *_):
        _stop_workers(self.pool, signal.SIGTERM)
        raise KeyboardInterrupt("SIGTERM: the runs under way were asked to stop")

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)


def run_pool(cfgs: list[TrainConfig], parallel: int, train_kwargs: dict, deadline: float | None = None,
             on_record=None) -> list:
    """Records of ``cfgs`` trained by a pool of ``parallel`` processes, dependencies first. At
    ``deadline`` (a ``time.time()``) no run is started and the runs under way are asked to stop
    (each saves a checkpoint to resume from); their records are None. ``on_record(cfg, rec)``
    runs as each run ends."""
    hashes = [config_hash(c) for c in cfgs]
    recs = [load_record(h, train_kwargs.get("records")) for h in hashes]
    todo = {i for i, r in enumerate(recs) if r is None and hashes.index(hashes[i]) == i}  # once per config
    needs = {i: {hashes.index(d) for d in (cfgs[i].teacher, cfgs[i].init_from) if d in hashes} & todo
             for i in todo}
    bar = tqdm(total=len(set(hashes)), initial=len(set(hashes)) - len(todo), desc="runs", unit="run")
    pool = worker_pool(parallel)
    running = {}
    try:
        with _ForwardStop(pool):
            _drive(pool, cfgs, recs, todo, needs, running, train_kwargs, deadline, on_record, bar)
    finally:
        pool.shutdown(cancel_futures=True)
        bar.close()
    return [recs[hashes.index(h)] for h in hashes]


def _drive(pool, cfgs, recs, todo, needs, running, train_kwargs, deadline, on_record, bar) -> None:
    """Submit runs as their dependencies finish, collect records, stop at the deadline."""
    while todo or running:
        ready = sorted(i for i in todo if not needs[i])
        for i in ready:
            running[pool.submit(_train_in_worker, cfgs[i], **train_kwargs)] = i
        todo -= set(ready)
        left = None if deadline is None else deadline - time.time()
        finished, _ = wait(running, timeout=left and max(left, 0), return_when=FIRST_COMPLETED)
        if not finished:     # the deadline: checkpoints, then no records for these runs
            _stop_workers(pool, signal.SIGTERM)
            if wait(running, timeout=STOP_GRACE_S).not_done:
                _stop_workers(pool, signal.SIGKILL)
                wait(running)
            todo.clear()
        for f in finished or list(running):
            i = running.pop(f)
            try:
                recs[i] = f.result()          # a worker's exception is raised here
            except (KeyboardInterrupt, BrokenProcessPool):  # stopped at the deadline
                if finished:
                    raise
            if on_record and recs[i] is not None:
                on_record(cfgs[i], recs[i])
            for n in needs.values():
                n.discard(i)
            bar.update()


STOP_GRACE_S = 30  # after a stop request, how long the runs under way get to save a checkpoint


def _stop_workers(pool: ProcessPoolExecutor, sig: int) -> None:
    """``sig`` to each worker; on SIGTERM the trainer saves a checkpoint after its step and stops."""
    for proc in list(getattr(pool, "_processes", {}).values()):
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def summary(df: pd.DataFrame, metric: str = "final_top1") -> pd.DataFrame:
    """Mean, std and count of ``metric`` per arm (crashed runs counted apart), in arm order."""
    ok = df[df.status == "ok"]
    g = ok.groupby("label", sort=False)[metric]
    out = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1), "n": g.size()})
    out["crashes"] = df[df.status == "crash"].groupby("label").size()
    out = out.reindex(df.label.unique())
    return out.fillna({"crashes": 0, "n": 0}).astype({"crashes": int, "n": int})


def beyond_noise(a, b) -> bool:
    """True when the 95 % Welch interval of ``mean(b) - mean(a)`` excludes 0 (needs 2+ seeds each)."""
    d = stats.welch(a, b)
    return not math.isnan(d.lo) and (d.lo > 0 or d.hi < 0)


def verdict(paper_delta: float, base, other, *, equal_within: float = 0.5, margin: float = 1.0,
            chance: float | None = None) -> str:
    """Verdict word of one row: :func:`vitmlp.stats.row_verdict`."""
    return stats.row_verdict(paper_delta, base, other, equal_within=equal_within, margin=margin,
                             chance=chance)["verdict"]


item_verdict = stats.item_verdict


def compare(df: pd.DataFrame, paper: dict, base: str, metric: str = "final_top1", *, margin: float = 1.0,
            equal_within: float = 0.5) -> pd.DataFrame:
    """The paper's table beside ours, as differences to a baseline row.

    paper: arm label -> the paper's value (same units as ``metric``; None where the paper prints
    nothing, e.g. an arm this book adds); base: the baseline's label. One row per label of
    ``paper``: paper value and difference, ours (mean, std over seeds), our difference with its
    95 % interval, seeds, crashes, the smallest difference the row can detect (``MDE``, 80 %
    power), and the row's verdict with its reason (:func:`vitmlp.stats.row_verdict`; a paper
    difference within ``equal_within`` claims "about the same", judged within +-``margin``)."""
    ok = df[df.status == "ok"]
    scores = {l: g[metric].to_numpy() for l, g in ok.groupby("label", sort=False)}
    crashes = df[df.status == "crash"].groupby("label").size()
    classes = df["num_classes"].dropna() if "num_classes" in df else pd.Series(dtype=float)
    chance = 100 / classes.iloc[0] if metric.endswith("top1") and len(classes) else None
    b, pb = pd.Series(scores.get(base, []), dtype=float), paper.get(base)
    rows = []
    for label, pv in paper.items():
        ours = pd.Series(scores.get(label, []), dtype=float)
        d_paper = None if pv is None or pb is None else round(float(pv) - float(pb), 2)
        v = stats.row_verdict(d_paper, b, ours, equal_within=equal_within, margin=margin, chance=chance)
        n = min(len(ours), len(b))
        spread = math.sqrt((ours.var(ddof=1) + b.var(ddof=1)) / 2) if n > 1 else math.nan
        rows.append({"row": label, "paper": pv, "paper Δ": d_paper,
                     "ours": round(ours.mean(), 2) if len(ours) else math.nan,
                     "± std": round(ours.std(ddof=1), 2) if len(ours) > 1 else math.nan,
                     "ours Δ": round(ours.mean() - b.mean(), 2) if len(ours) else math.nan,
                     "95% CI": "" if label == base or math.isnan(v["ci_lo"]) else f"[{v['ci_lo']:+.1f}, {v['ci_hi']:+.1f}]",
                     "MDE": "" if label == base else round(stats.mde(spread, n), 1),
                     "seeds": len(ours), "crashes": int(crashes.get(label, 0)),
                     "verdict": "(baseline)" if label == base else v["verdict"],
                     "why": "" if label == base else v["why"],
                     "p_paper": v["p_paper"], "p_other": v["p_other"]})
    return pd.DataFrame(rows)


def plot_deltas(table: pd.DataFrame, df: pd.DataFrame, base: str, title: str, profile: str,
                metric: str = "final_top1"):
    """Bars of the paper's and our differences to the baseline, ours with the 95 % Welch interval."""
    import matplotlib.pyplot as plt
    t = table[table.row != base]
    ok = df[df.status == "ok"]
    b = ok[ok.label == base][metric]

    def half(label):  # half-width of the 95 % Welch interval (none below 2 seeds)
        d = stats.welch(b, ok[ok.label == label][metric])
        return 0.0 if math.isnan(d.lo) else (d.hi - d.lo) / 2
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(t) + 1.2))
    y = list(range(len(t)))[::-1]
    ax.barh([v + 0.2 for v in y], t["paper Δ"].astype(float), height=0.4, color="0.7", label="paper")
    ax.barh([v - 0.2 for v in y], t["ours Δ"].astype(float), height=0.4, color="C0",
            xerr=[half(label) for label in t.row],
            label=f"this book ({profile} profile, 95 % interval over seeds; none for one seed)")
    untrained = t.why.astype(str).str.startswith("did not train") if "why" in t else pd.Series(False, index=t.index)
    ax.set_yticks(y, [f"{r} (did not train)" if u else r for r, u in zip(t.row, untrained)])
    for v, u in zip(y, untrained):   # no verdict: the runs of this row stayed at chance
        if u:
            ax.axhspan(v - 0.5, v + 0.5, color="0.9", zorder=0)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel(f"top-1 difference to {base} (points)")
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def curves(df: pd.DataFrame, key: str = "val_top1") -> pd.DataFrame:
    """Long table of one curve per run: label, seed, epoch, value."""
    rows = [{"label": r.label, "seed": r.seed, "epoch": e, key: v}
            for r in df.itertuples() for e, v in zip(r.curves.get("epoch", []), r.curves.get(key, []))]
    return pd.DataFrame(rows, columns=["label", "seed", "epoch", key])
