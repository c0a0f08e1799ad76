"""What a reduced-profile notebook does: plan the runs of a table, train them (cached), and
summarise them over seeds.

    arms = [Arm("ViT", "vit_S"), Arm("bag of patches", "resmlp_S12", {"cross_patch": "none"})]
    runs = plan("cpu", arms)        # validates everything first: nothing is trained on a bad name
    df = run(runs)                  # one row per (arm, seed); cached runs are not retrained
    summary(df)                     # mean, std, n per arm

How a difference becomes a verdict (the paper's table beside ours, intervals, equivalence, "did not
train", Holm): :mod:`vitmlp.stats`; the figures: :mod:`vitmlp.plots`; recipes at a profile's scale
(the ResNet recipe, the paper's steps): :mod:`vitmlp.profiles`.
"""
from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import pandas as pd
import torch
from tqdm.auto import tqdm

from . import runqueue
from .data import DATASETS
from .models import check_choice, create_model
from .profiles import NO_VIT_OPTIONS, get_profile, run_config
from .profiles import seeds as seeds_of
from .records import config_hash, load_record, run_cache
from .stats import FAILED_POINTS, failed
from .train import TrainConfig, load_weights, train
from .train.trainer import PROGRESS, REBUILD_TOLERANCE, rebuild_gap, rebuilt_weights
from .train.state import request_stop, stops_for_good


@dataclass
class Arm:
    """One row of an experiment table: a label, a model and what differs from the profile."""
    label: str
    model: str
    model_options: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)     # TrainConfig fields, e.g. lr=, sam_rho=, dataset=
    dataset_options: dict = field(default_factory=dict)


def convnet_teacher(profile: str, epochs_factor: int = 1) -> Arm:
    """The convnet that DeiT-style distillation learns from (the papers use RegNetY-16GF): a
    ResNet-18 from timm at the profile's resolution (37 M multiply-adds at 32 px, as much as a
    reduced ResMLP-S12), trained ``epochs_factor`` times as long as the students (at the calibrated
    ``cpu`` profile it reaches its plateau well within the students' schedule: appendix)."""
    return Arm("convnet teacher (ResNet-18)", "timm:resnet18", dict(NO_VIT_OPTIONS),
               {"epochs": get_profile(profile).epochs * epochs_factor})


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


def plateau_twins(profile: str, arms: list[Arm], df: pd.DataFrame, own_schedule=(), compared=None,
                  records=None) -> list[tuple[str, TrainConfig]]:
    """The plateau check's plan: the arms at twice their schedule (their steps where they set them,
    else their epochs), with the seeds they ran with in ``df``. An arm whose runs still rose by more
    than ``stats.PLATEAU_POINTS`` over their last quarter of epochs (``stats.rising``) is planned, and
    with it every arm it is compared with (``stats.at_plateau`` reads a comparison at one schedule):
    ``compared`` is a baseline's label (each arm against it), a list of groups of labels compared
    among themselves, or None (all arms, one group). None for the labels in ``own_schedule`` (their
    schedule is what they test); an arm level over its last quarter whose 2x runs are all recorded
    (in ``records``) and gained more than that from the doubling rises too. Where a rising arm's 2x
    runs are all recorded and still rise, it climbs to 4x, and so on up to ``stats.MAX_DOUBLINGS``;
    the others of its group are planned only at the schedule where the climbers level or wait for
    their runs (the claim may be read there), not at the ones between unless their runs are recorded.
    A notebook reads them with ``run(..., missing="skip")`` and gives them to
    ``stats.compare(doubled=...)``: a queue trains them (a GPU), not the notebook."""
    from .stats import MAX_DOUBLINGS, rising
    own, by_label = set(own_schedule), {a.label: a for a in arms}
    groups = ([list(by_label)] if compared is None else [[compared, x] for x in by_label if x != compared]
              if isinstance(compared, str) else compared)
    unknown = {x for g in groups for x in g} - set(by_label)
    if unknown:
        raise ValueError(f"plateau_twins: compared names {sorted(unknown)}, not among the arms {list(by_label)}")

    def longer(label, d):   # the arm at 2**d times its schedule, at the seeds it ran with in df
        a = by_label[label]
        cfg = plan(profile, [a], seeds=[0])[0][1]
        times = {"steps": 2 ** d * cfg.steps} if cfg.steps else {"epochs": 2 ** d * cfg.epochs}
        return plan(profile, [Arm(label, a.model, a.model_options, {**a.overrides, **times}, a.dataset_options)],
                    sorted(df[df.label == label].seed.unique().tolist()))

    def recorded(labels, d):   # their runs at 2**d times the schedule, for the labels with all of them recorded
        table = _table(twins := [r for x in labels for r in longer(x, d)], _records(twins, records))
        return table[~table.label.isin(table.label[table.status == "missing"])]

    def settled(labels, d):   # (those of labels with all their 2**d runs recorded, those of them still rising)
        table = recorded(labels, d)   # rising: over their last quarter, or what their recorded runs at twice it added
        twice = recorded(list(dict.fromkeys(table.label)), d + 1) if len(table) else None
        return set(table.label), set(rising(table, longer=twice))

    need = {}   # label -> the doublings to plan it at; the same walk as stats._plateau's
    for g in groups:
        g, d = [x for x in g if x not in own], 0
        ran = [x for x in g if x in set(df.label)]
        climbing = [x for x in ran if x in set(rising(df, longer=recorded(ran, 1) if ran else None))]
        while climbing and d < MAX_DOUBLINGS:
            d += 1
            done, up = settled(climbing, d)
            if done == set(climbing) and up:   # still rising: they climb on, alone
                at_d, climbing = climbing, [x for x in g if x in up]
            else:   # their runs pending, or level: the claim may be read here, with every row
                at_d = g
                climbing = [x for x in g if x in settled(g, d)[1]] if done == set(climbing) else []
            for x in at_d:
                need.setdefault(x, set()).add(d)
        for x in g:   # a level row's runs at the schedules between, where recorded: read (shown), not trained
            need.setdefault(x, set()).update(k for k in range(1, d) if settled([x], k)[0])
    return [r for a in arms for d in sorted(need.get(a.label, ())) for r in longer(a.label, d)]


def run(runs: list[tuple[str, TrainConfig]], *, parallel: int | None = None, missing: str = "train",
        need_weights: bool = False, **train_kwargs) -> pd.DataFrame:
    """Train every planned run (skipping recorded ones); one row per run, in the order given.

    parallel: runs trained at once, each in its own process with its share of the cores (None: the
    profile's ``parallel_runs``; on 2 CPU cores two 1-thread runs train 0.85-1.8x the images/s of one
    2-thread run, see the appendix; they also overlap each run's set-up and evaluation). A run
    waits for the runs it needs (its ``teacher``, its ``init_from``) when they are in the list.
    missing="skip": train nothing; a run without a record gets status ``missing`` (counted aloud),
    for sweeps sized for a GPU (``python -m vitmlp.runqueue``) read on a laptop. In a collect the
    runs are noted, and a call with an unrecorded run stops the notebook (``runqueue.Collected``),
    unless it reads with missing="skip" (it is written for rows without a record: it goes on).
    need_weights: the notebook goes on to read these runs' final weights (an analysis); in a collect
    every weight the cache lacks is noted at once, not only the first one it asks for.
    """
    check_choice("missing", missing, ("train", "skip"))
    parallel = parallel or (get_profile(runs[0][1].profile).parallel_runs if runs else 1)
    collect = runqueue.collecting()  # `python -m vitmlp.runqueue collect`: note the runs, train nothing
    if collect or missing == "skip":
        if collect:
            runqueue.note([cfg for _, cfg in runs])
        recs = _records(runs, train_kwargs.get("records"))
        n = sum(r["status"] == "missing" for r in recs)
        if collect and need_weights:   # a crashed run has no weights to ask for
            runqueue.need_weights([cfg for (_, cfg), r in zip(runs, recs) if r["status"] in ("ok", "missing")],
                                  "this analysis", train_kwargs.get("cache"))
        if n and collect and missing == "train":  # what follows needs their numbers: end here, not in an IndexError
            raise runqueue.Collected(f"{n} of {len(runs)} runs noted; the notebook needs their numbers and "
                                     "stops here in collect mode")
        if n:   # the run's log (stderr), like a progress bar: the page's table says what the rows lack
            print(f"{n} of {len(runs)} runs have no record and were not trained (missing='skip'); "
                  "train them with `python -m vitmlp.runqueue` (README) or missing='train'", file=sys.stderr)
    elif parallel == 1:
        recs = [train(cfg, **train_kwargs) for _, cfg in tqdm(runs, desc="runs", unit="run")]
    else:
        recs = run_pool([cfg for _, cfg in runs], parallel, train_kwargs)
    return _table(runs, recs, need_weights)


def _records(runs: list[tuple[str, TrainConfig]], records=None) -> list[dict]:
    """The runs' records, {"status": "missing"} where a run has none."""
    return [load_record(config_hash(cfg), records) or {"status": "missing"} for _, cfg in runs]


def _table(runs: list[tuple[str, TrainConfig]], recs: list[dict], need_weights: bool = False) -> pd.DataFrame:
    """:func:`run`'s rows: one per run, from its record."""
    rows = []
    for (label, cfg), rec in zip(runs, recs):
        m, machine = rec.get("metrics", {}), rec.get("machine", {})
        rows.append({"label": label, "seed": cfg.seed, "hash": config_hash(cfg), "status": rec["status"],
                     "schedule": cfg.steps or cfg.epochs,   # what the plateau check doubles
                     "num_classes": rec.get("num_classes"),
                     "final_top1": m.get("final_top1", math.nan), "best_top1": m.get("best_top1", math.nan),
                     "train_loss": m.get("final_train_loss", math.nan),
                     "crash_step": (rec.get("crash") or {}).get("step"),
                     "images_per_s": rec.get("images_per_s"), "wall_time_s": rec.get("wall_time_s"),
                     "threads": machine.get("torch_threads"), "cores": machine.get("cores"),
                     "gpu": machine.get("gpu"), "curves": rec.get("curves", {}),
                     "rebuilt_weights": rec.get("rebuilt_weights") or {}, "reads_weights": need_weights})
    return pd.DataFrame(rows)


def training_time(*dfs: pd.DataFrame, cache=None) -> str:
    """The training time of the runs in ``dfs`` (rows of :func:`run`), read from their records, so a
    re-run that finds them cached states the same time. A run that used t of its machine's c cores
    counts t/c of its wall time, since c/t such runs trained at once. Runs trained on a GPU (the
    queue runner) are stated apart, with the GPU's name: their wall time, shared by the runs that
    trained beside them. Then every rebuild of weights the runs loaded or the page read (``cache``:
    where the page read them, as given to :func:`run`)."""
    runs = pd.concat(dfs).drop_duplicates("hash")
    unrecorded = int(runs.cores.isna().sum())   # queued (a collect) or missing: no time to read
    runs = runs[runs.cores.notna()]
    on_gpu = runs["gpu"].notna() if "gpu" in runs else pd.Series(False, index=runs.index)
    cpu, gpu = runs[~on_gpu], runs[on_gpu]
    parts = []
    if len(cpu) or not len(gpu):
        minutes = (cpu.wall_time_s * cpu.threads / cpu.cores).sum() / 60
        cores = "/".join(str(int(c)) for c in sorted(cpu.cores.unique()))
        parts.append(f"{minutes:.0f} min on {cores or '?'} cores ({_runs(len(cpu))}")
    if len(gpu):
        parts.append(f"{gpu.wall_time_s.sum() / 60:.0f} min of wall time on {'/'.join(sorted(gpu.gpu.unique()))} "
                     f"({_runs(len(gpu))}, several at once")
    return ("Training time " + "), ".join(parts) + ", from their records; cached runs are not retrained"
            + (f"; {_runs(unrecorded)} without a record" if unrecorded else "") + ")" + _rebuilds(runs, cache))


def _runs(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


def _rebuilds(runs: pd.DataFrame, cache=None) -> str:
    """What the runs' records say of teacher / start-point weights that were rebuilt (a cache
    without them), and the cache of the weights an analysis read (``reads_weights``): where, and how
    the rebuild compares with the record of the run it repeats."""
    rebuilds = {}   # one entry per rebuild: a teacher rebuilt twice (two machines) is two
    for run_hash, d in zip(runs.get("hash", []), runs.get("rebuilt_weights", [])):
        for h, n in (d or {}).items():
            rebuilds.setdefault((h, n.get("created", "")), (n, [], []))[1].append(run_hash[:8])
    for run_hash, reads in zip(runs.get("hash", []), runs.get("reads_weights", [])):
        if reads is True and (n := rebuilt_weights(run_hash, cache)):
            rebuilds.setdefault((run_hash, n.get("created", "")), (n, [], []))[2].append(run_hash)
    # rebuilds alike (where, in what, against what) are said in one sentence: the weights a page reads
    # together, a teacher rebuilt twice (two calls of one GPU kind); teachers loaded by their own runs apart
    groups = {}
    for (h, _), (n, users, read) in sorted(rebuilds.items()):
        new, old = n["rebuilt"], n["record"]
        g = groups.setdefault((new["hardware"], new["precision"], old["hardware"], old["precision"], bool(read),
                               h if users else None), {"rebuilt": [], "record": {}, "users": [], "loaded": []})
        g["rebuilt"].append((h[:8], new["final_top1"], rebuild_gap(n)))
        g["loaded"] += [d for d in map(_loaded, (n.get("loaded") or {}).items()) if d not in g["loaded"]]
        g["record"][h[:8]] = old["final_top1"]
        g["users"] += [u for u in users if u not in g["users"]]
    said = []
    for (new_hw, new_p, old_hw, old_p, read, _), g in groups.items():
        users, n, many = g["users"], len(g["rebuilt"]), len(g["record"]) > 1
        who = ([f"run{'s' if len(users) > 1 else ''} {', '.join(users)} loaded "
                + ("those rebuilds" if n > 1 else "that rebuild")] if users else []) + \
            ([f"this page reads {'them' if n > 1 else 'it'}"] if read else []) + \
            ([f"{'these rebuilds' if n > 1 else 'the rebuild'} loaded {' and '.join(g['loaded'])}"] if g["loaded"] else [])
        whose = f"the weights of runs {', '.join(g['record'])}" if many else f"run {next(iter(g['record']))}'s weights"
        times = f"{n} rebuilds, " if n > len(g["record"]) else ""
        off = [f"run {h}'s rebuild lands {gap:.1f} points from its record (beyond the "
               f"{REBUILD_TOLERANCE:g}-point tolerance: another trajectory" + (", not read as that run's)" if read else ")")
               for h, _, gap in g["rebuilt"] if gap > REBUILD_TOLERANCE]
        said.append(f"{whose} were rebuilt on {new_hw} in {new_p} ({times}top-1 "
                    f"{', '.join(f'{t:.1f}' for _, t, _ in g['rebuilt'])} %), {'their records' if many else 'its record'} "
                    f"trained on {old_hw} in {old_p} (top-1 {', '.join(f'{t:.1f}' for t in g['record'].values())} %); "
                    f"{'; '.join([' and '.join(who), *off])}")
    return "".join(f". {s[0].upper()}{s[1:]}" for s in said)


def _loaded(item) -> str:
    """The teacher / start point a rebuild loaded (its note's ``loaded``): the run's own weights or a rebuild."""
    h, n = item
    return (f"{h[:8]}'s own weights" if n is None else
            f"{h[:8]}'s weights as rebuilt on {n['rebuilt']['hardware']} in {n['rebuilt']['precision']} "
            f"(top-1 {n['rebuilt']['final_top1']:.1f} %)")


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
    stops_for_good()
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


def _train_in_worker(job, **train_kwargs) -> dict | None:
    """Train a config; or, given a run's hash, rebuild that recorded run's missing weights."""
    _busy.set()
    try:
        if isinstance(job, str):
            load_weights(job, records=train_kwargs.get("records"), cache=train_kwargs.get("cache"))
            return None
        return train(job, **train_kwargs)
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
             on_record=None, rebuild=()) -> list:
    """Records of ``cfgs`` trained by a pool of ``parallel`` processes, dependencies first. At
    ``deadline`` (a ``time.time()``) no run is started and the runs under way are asked to stop
    (each saves a checkpoint to resume from); their records are None. ``on_record(cfg, rec)``
    runs as each run ends. A recorded teacher (or start point) missing from the cache is rebuilt
    once, before the runs that load it; the recorded runs of ``rebuild`` (hashes whose weights an
    analysis reads) are rebuilt after the new runs."""
    hashes = [config_hash(c) for c in cfgs]
    recs = [load_record(h, train_kwargs.get("records")) for h in hashes]
    todo = {i for i, r in enumerate(recs) if r is None and hashes.index(hashes[i]) == i}  # once per config
    needs = {i: {hashes.index(d) for d in cfgs[i].loads if d in hashes} & todo
             for i in todo}
    # a recorded teacher / start point whose weights this cache lacks is trained again once, as its own
    # job, before the runs that load it (each of them would otherwise rebuild it at the same time)
    jobs, keys, runs = list(cfgs), list(hashes), sorted(todo)
    training = {hashes[i] for i in runs}
    deps = _weights_to_rebuild([cfgs[i] for i in runs], training, train_kwargs)
    first = set()   # a teacher's rebuild goes before everything: its students wait for it
    for d in deps + [h for h in _weights_to_rebuild([], training, train_kwargs, rebuild) if h not in deps]:
        k = len(jobs)
        jobs.append(d)
        keys.append(d)
        recs.append(None)
        todo.add(k)
        needs[k] = set()
        if d in deps:
            first.add(k)
        for i in runs:
            if d in cfgs[i].loads:
                needs[i].add(k)
    # the bar counts the rebuilds too: a queue of recorded runs whose weights are rebuilt is not done
    rebuilds = len(jobs) - len(cfgs)
    bar = tqdm(total=len(set(hashes)) + rebuilds, initial=len(set(hashes)) - len(runs),
               desc="runs + rebuilds" if rebuilds else "runs", unit="job")
    pool = worker_pool(parallel)
    running = {}
    try:
        with _ForwardStop(pool):
            _drive(pool, parallel, jobs, keys, recs, todo, needs, running, train_kwargs, deadline, on_record, bar,
                   first)
    finally:
        pool.shutdown(cancel_futures=True)
        bar.set_postfix_str("")
        bar.close()
    return [recs[hashes.index(h)] for h in hashes]


def _weights_to_rebuild(cfgs, training: set, train_kwargs, extra=()) -> list[str]:
    """Teachers and start points of ``cfgs`` (sorted), then the hashes ``extra`` (in their order), not
    among the hashes ``training``, that have a record (status ok) but no weights in the cache."""
    deps = dict.fromkeys([*sorted({d for c in cfgs for d in c.loads}), *extra])
    return [d for d in deps if d not in training
            and (load_record(d, train_kwargs.get("records")) or {}).get("status") == "ok"
            and not (run_cache(d, train_kwargs.get("cache")) / "model.pt").exists()]


def _drive(pool, slots, jobs, keys, recs, todo, needs, running, train_kwargs, deadline, on_record, bar,
           first=frozenset()) -> None:
    """Hand jobs (configs, and hashes of weights to rebuild) to the pool's ``slots`` workers as their
    dependencies finish, the jobs ``first`` (a teacher's rebuild) before the others, the others in
    their order; collect records; stop at the deadline."""
    start = time.time()
    while todo or running:
        # a job is handed over only when a worker is free: none waits in the pool's own queue, where
        # a rebuild could not overtake the runs before it, and where, at the deadline, each waiting
        # run would still start, only to stop and save an empty checkpoint
        ready = sorted((i for i in todo if not needs[i]), key=lambda i: (i not in first, i))
        for i in ready[:max(slots - len(running), 0)]:
            running[pool.submit(_train_in_worker, jobs[i], **train_kwargs)] = i
            todo.discard(i)
        bar.set_postfix_str(under_way([keys[i] for i in running.values()], train_kwargs.get("cache"), start,
                                      queued=len(todo)))
        left = None if deadline is None else deadline - time.time()
        finished, _ = wait(running, timeout=PROGRESS_S if left is None else max(min(left, PROGRESS_S), 0),
                           return_when=FIRST_COMPLETED)
        if not finished and (deadline is None or time.time() < deadline):
            continue          # a refresh of the bar's epochs
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
                on_record(jobs[i], recs[i])
            for n in needs.values():
                n.discard(i)
            bar.update()


STOP_GRACE_S = 30  # after a stop request, how long the runs under way get to save a checkpoint
PROGRESS_S = 20    # how often the bar of a pool shows the epochs of the runs under way


def under_way(hashes, cache=None, since: float = 0.0, queued: int = 0) -> str:
    """'f69efd1f 21/48 ep, 3da350ba 0/48 ep; 2 waiting': the epochs done by the submitted runs (or
    weight rebuilds) of ``hashes`` that have started, from the progress file each writes beside its
    checkpoint as it starts and after every epoch; a file older than ``since`` (a ``time.time()``: the
    pool's start) is a stopped run's, and the job is still waiting, as are ``queued`` others."""
    said, waiting = [], queued
    for h in hashes:
        f = run_cache(h, cache) / PROGRESS
        try:
            p = json.loads(f.read_text()) if f.stat().st_mtime >= since else None
        except (OSError, ValueError):
            p = None
        if p is None:
            waiting += 1
        else:
            said.append(f"{h[:8]} {p['epoch']}/{p['epochs']} ep")
    return "; ".join(filter(None, (", ".join(said), f"{waiting} waiting" if waiting else "")))


def _stop_workers(pool: ProcessPoolExecutor, sig: int) -> None:
    """``sig`` to each worker; on SIGTERM the trainer saves a checkpoint after its step and stops."""
    for proc in list(getattr(pool, "_processes", {}).values()):
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


# Scaled ReLU's baseline row (Tables 1-3, 5): DeiT-Small on DeiT's recipe, lr 5e-4 with 5 warm-up epochs
PAPER_BASE_LR, PAPER_BASE_WARMUP = 5e-4, 5.0


def paper_arm(profile: str, label: str, model_options: dict, lr: float, warmup: float, sam_rho: float | None = None,
              model: str = "vit_S") -> Arm:
    """A row of a paper's recipe grid (Scaled ReLU Tables 1-3, 5, 7, Figure 1, the text): ``model`` with
    ``model_options`` at the paper's learning rate ``lr`` and ``warmup`` epochs, SAM (radius ``sam_rho``)
    around the profile's optimiser when given. The paper's baseline recipe (lr PAPER_BASE_LR with
    PAPER_BASE_WARMUP warm-up epochs, DeiT's) is the profile's own recipe, and every other rate and warm-up
    keeps its ratio to it: 1e-3 -> 2x the profile's lr, 1e-4 -> 1/5 of it, 20 warm-up epochs -> 4x the
    profile's warm-up, 0 -> none. So the baseline row with the patchify stem (no options) is the profile's
    own ``model`` run, and a row that two notebooks build is one cached run."""
    from .choices import check_number
    lr, warmup = check_number("lr", lr, above=0), check_number("warmup", warmup, at_least=0)
    base = run_config(profile, model)
    exact = lambda x: float(f"{x:.12g}")  # noqa: E731  (1e-4/5e-4 x 4e-3 is 8e-4, as typed, in every notebook)
    over = {"lr": exact(base.lr * lr / PAPER_BASE_LR), "warmup_epochs": exact(base.warmup_epochs * warmup / PAPER_BASE_WARMUP)}
    options = dict(model_options)
    if options.get("stem") == "volo" and options.get("stem_convs", 3):   # a conv stem: the width of this scale
        width = conv_stem_width(profile, model)[0]
        options |= {"stem_width": width} if width != PAPER_STEM_WIDTH else {}
    return Arm(label, model, options, {**over, **({"sam_rho": sam_rho} if sam_rho else {})})


PAPER_STEM_WIDTH = 64   # Scaled ReLU's conv stem: 64 channels on DeiT-Small (384 wide, 224 px)


@functools.lru_cache
def conv_stem_width(profile: str, model: str = "vit_S") -> tuple[int, float, float]:
    """(channels, the share of multiply-adds the conv stem adds here, the paper's share): of 8, 16, ...,
    64 channels, the width whose stem adds the paper's share of the model's multiply-adds (+28 % on
    DeiT-Small: "adding few parameters and flops"). At a reduced width the paper's 64 channels would
    add far more (+162 % at ``cpu``, where 24 channels add +27 %), so a conv-stem row would test
    capacity, not the stem. Counted on the meta device (``parallel_vit.forward_macs``)."""
    from .models.stems import SCALED_RELU_STEMS
    from .parallel_vit import forward_macs

    def macs(prof, **stem):
        with torch.device("meta"):
            return forward_macs(create_model(model, **{**run_config(prof, model).model_options, **stem}))

    def share(prof, width, plain):
        return macs(prof, **SCALED_RELU_STEMS["3Conv+3BN+3ReLU+1Proj"], stem_width=width) / plain - 1
    paper = share("paper", PAPER_STEM_WIDTH, macs("paper"))
    plain = macs(profile)
    here = {w: share(profile, w, plain) for w in range(8, PAPER_STEM_WIDTH + 1, 8)}
    width = min(here, key=lambda w: abs(here[w] - paper))
    return width, here[width], paper


# Dual PatchNorm's five ImageNet-1k ViTs (Figure 1, Tables 1 and 4), in the paper's order
DPN_ARCHS = ("Ti/16", "S/32", "B/32", "S/16", "B/16")
BLOCK_NORM_LABELS = {"normformer": "NormFormer", "subln": "Sub-LN"}   # the others: "LN <attention>/<MLP>"


def dpn_patch(profile: str, paper_patch: int) -> int:
    """The patch side that stands for the paper's ``paper_patch`` px (16 or 32) at ``profile``: the
    profile's patch stands for 16 px and the ratio is kept (32 px images, 4-px patches: /32 -> 8 px,
    a 4x4 grid against 8x8, as the paper's 7x7 against 14x14 at 224 px)."""
    P = get_profile(profile)
    check_choice("paper patch", paper_patch, (16, 32))
    patch = P.patch * paper_patch // 16
    if P.img_size % patch:
        raise ValueError(f"the paper's /{paper_patch} patch maps to {patch} px at profile {profile!r}, which does "
                         f"not tile its {P.img_size}-px images")
    return patch


def dpn_arm(profile: str, arch: str, block_norm: str = "pre/pre", dpn: str | None = None) -> Arm:
    """One run of Dual PatchNorm's items, built here only, so that Figure 1 and Tables 1 and 4 share
    their cached runs (Figures 2-3's ViT-Ti + DPN and ViT-B with and without DPN are the same
    configurations as the Ti/16 and B/32 rows here). ``arch``: one of DPN_ARCHS, the width at the
    profile's scale with the patch of :func:`dpn_patch`; ``block_norm``: the LayerNorm placement of
    every block (``vit.BLOCK_NORMS``, "pre/pre" the ViT's); ``dpn``: None (the patchify stem) or a
    ``stems.DPN_VARIANTS`` entry, "dual" the full DPN. Every row trains on the profile's recipe (the
    paper applies DPN on each baseline's recipe without tuning); only options that differ from the
    model's defaults enter the config. Labels: ``ViT-S/32``, ``ViT-S/32 + DPN``, ``ViT-S/32 LN post/pre``,
    ``ViT-S/32 NormFormer``, ``ViT-S/32 + DPN (Pre)`` (Table 4's row names, ``stems.DPN_TABLE4``)."""
    from .models.stems import DPN_TABLE4, DPN_VARIANTS
    from .models.vit import BLOCK_NORMS
    check_choice("Dual PatchNorm architecture", arch, DPN_ARCHS)
    check_choice("block_norm", block_norm, BLOCK_NORMS)
    check_choice("dpn", dpn, (None, *DPN_VARIANTS))
    width, paper_patch = arch.split("/")
    patch = dpn_patch(profile, int(paper_patch))
    options = {} if patch == get_profile(profile).patch else {"patch_size": patch}
    label = f"ViT-{arch}"
    if block_norm != "pre/pre":
        options["block_norm"] = block_norm
        label += " " + BLOCK_NORM_LABELS.get(block_norm, f"LN {block_norm}")
    if dpn is not None:
        options["stem"] = "dpn"
        if dpn != "dual":
            options["dpn_variant"] = dpn
        label += " + DPN" + ("" if dpn == "dual" else f" ({dict(map(reversed, DPN_TABLE4.items()))[dpn]})")
    return Arm(label, f"vit_{width}", options)


SWEEP_MULTIPLIERS = (1, 2, 4, 8, 16, 32, 64, 128)   # an upward lr sweep, x the arm's lr (a quick profile: the ends)
SWEEP_PAPER_EPOCHS = 50   # a sweep run trains the part of the schedule that stands for the paper's first 50 of 300


def sweep_epochs(profile: str) -> int | None:
    """Epochs of the profile's schedule that a :func:`crash_sweep` run trains (``stop_epoch``): those that
    stand for the paper's first SWEEP_PAPER_EPOCHS of 300 (rounded up; Scaled ReLU's crashes come "in the
    first few epochs", after warm-ups of at most 20), the lr following the whole schedule; None (all of
    it) at a profile too short to cut."""
    from .profiles import paper_epochs
    e = math.ceil(round(paper_epochs(profile, SWEEP_PAPER_EPOCHS), 9))
    return e if e < get_profile(profile).epochs else None


def crash_sweep(profile: str, arm: Arm, multipliers=None, seeds=1) -> list[tuple[str, TrainConfig]]:
    """The planned runs of an upward learning-rate sweep of ``arm`` (Scaled ReLU Tables 1-3): its lr
    (the profile's unless the arm sets one) times each multiplier, labelled ``"<label> ×<m>"``, each
    trained for the first :func:`sweep_epochs` of the schedule (a crash probe, cheap; not a final top-1).
    multipliers None: SWEEP_MULTIPLIERS (the first and last at a quick profile)."""
    from .choices import check_list, check_number
    if multipliers is None:
        multipliers = SWEEP_MULTIPLIERS[::len(SWEEP_MULTIPLIERS) - 1] if get_profile(profile).quick else SWEEP_MULTIPLIERS
    multipliers = sorted(check_list("lr multipliers", list(multipliers), check_number, count=2, distinct=True, above=0))
    lr = arm.overrides.get("lr", run_config(profile, arm.model, model_options=arm.model_options).lr)
    stop = {"stop_epoch": e} if (e := sweep_epochs(profile)) else {}
    return plan(profile, [Arm(f"{arm.label} ×{m:g}", arm.model, arm.model_options,
                              {**arm.overrides, "lr": m * lr, **stop}, arm.dataset_options) for m in multipliers], seeds)


def sweep_multipliers(df: pd.DataFrame) -> pd.Series:
    """The multiplier of each row of a :func:`crash_sweep` (rows of :func:`run`), read from its label."""
    return df.label.str.rsplit(" ×", n=1).str[1].astype(float)


def sweep_baseline(df: pd.DataFrame) -> float | None:
    """The mean top-1 of a :func:`crash_sweep`'s (rows of :func:`run`, one arm) lowest multiplier, the
    baseline recipe, over its runs that did not crash; None when all crashed."""
    m = sweep_multipliers(df)
    ok = df[(m == m.min()) & (df.status == "ok")].final_top1
    return ok.mean() if len(ok) else None


def first_failure(df: pd.DataFrame) -> float | None:
    """The smallest multiplier of a :func:`crash_sweep` (rows of :func:`run`, one arm) at which every
    run failed (:func:`vitmlp.stats.failed`: crashed, or ended more than FAILED_POINTS below the
    :func:`sweep_baseline`); None when no multiplier did."""
    m = sweep_multipliers(df)
    every = pd.Series(failed(df.status, df.final_top1, sweep_baseline(df)), index=df.index).groupby(m).all()
    return float(every[every].index.min()) if every.any() else None


def crash_regime(sweep: pd.DataFrame, paper_multiplier: float) -> str:
    """Whether this scale fails where the paper crashes, from the :func:`crash_sweep` (rows of :func:`run`)
    of the configuration the paper crashes (Scaled ReLU: the patchify stem at its 1e-3): "" when every
    run failed (:func:`first_failure`) at a swept multiplier at or below ``paper_multiplier`` (the
    paper's crashing rate at this scale); else why not, for :func:`vitmlp.stats.crash_verdict`'s
    ``no_crash_here``."""
    m, top = first_failure(sweep), sweep_multipliers(sweep).max()
    if m is not None and m <= paper_multiplier:
        return ""
    name = sweep.label.iloc[0].rsplit(" ×", 1)[0]
    where = f"only from x{m:g}" if m is not None else f"at no swept rate up to x{top:g}"
    return (f"at this scale the {name} fails (crashes, or ends more than {FAILED_POINTS:g} points below its x1 run) "
            f"{where} the profile's lr, not at the paper's crashing rate (x{paper_multiplier:g})")


def summary(df: pd.DataFrame, metric: str = "final_top1") -> pd.DataFrame:
    """Mean, std and count of ``metric`` per arm (crashed runs counted apart), in arm order."""
    ok = df[df.status == "ok"]
    g = ok.groupby("label", sort=False)[metric]
    out = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1), "n": g.size()})
    out["crashes"] = df[df.status == "crash"].groupby("label").size()
    out = out.reindex(df.label.unique())
    return out.fillna({"crashes": 0, "n": 0}).astype({"crashes": int, "n": int})
