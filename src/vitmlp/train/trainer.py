"""One trainer for every experiment of the book: ``train(config) -> record``.

    from vitmlp.profiles import run_config
    from vitmlp.train import train
    rec = train(run_config("cpu", "vit_S", seed=0))        # rec["metrics"]["final_top1"]

* A config already recorded (same hash, status ok or crash) is returned without training.
* Checkpoints go to ``$VITMLP_CACHE/runs/<hash>/last.pt`` every epoch and on Ctrl-C / SIGTERM (after
  the step under way); starting the same config again resumes there and ends with the metrics of
  an uninterrupted run. The final weights stay in ``<hash>/model.pt``.
* A loss that is NaN/inf, or above ``diverge_factor`` x max(first loss, ln C) for ``diverge_steps``
  steps in a row, ends the run as ``status="crash"`` with the step, instead of raising.
* Under ``torchrun --nproc_per_node=N`` the same call trains with DDP (gloo on CPU): each rank
  takes a contiguous slice of every global batch; only rank 0 writes.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
import warnings
from datetime import datetime, timezone

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from timm.data import Mixup
from timm.data.random_erasing import RandomErasing
from timm.layers import resample_abs_pos_embed
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from tqdm.auto import tqdm

from .. import runqueue
from ..records import (atomic_torch_save, atomic_write_json, cache_dir, check_writable, clean_stale_tmp, config_hash,
                       cpu_capability, hardware_kind, isa_caps, keep_rebuild, load_record, provenance, records_dir,
                       run_cache, save_record, set_aside)
from .batches import Batches, build_data, epoch_batches, pixel_shuffle
from .config import TrainConfig
from .sam import SAM
from .state import RunState, StopOnSignal, rng_state, seed_all, set_rng


# Updates between reading the loss back, per device type (1 where absent): on a GPU the host queues
# the next steps meanwhile, instead of waiting for each one (14 runs sharing one GPU made each wait).
LOSS_SYNC = {"cuda": 16}


def build_model(name: str, options: dict) -> nn.Module:
    from ..models import create_model  # imported late: tests swap in tiny models
    return create_model(name, **options)


def train(config, *, data=None, records=None, cache=None, progress=None, callback=None, force=False,
          workers=0) -> dict:
    """Train ``config`` (TrainConfig or dict) unless its record exists; return the record.

    data: (train, val) datasets instead of ``build_data(config)`` (the config's ``dataset`` name
    still goes into the hash). records / cache: folders instead of the defaults of
    :mod:`vitmlp.records`. progress: tqdm bar (default on unless ``$VITMLP_PROGRESS=0``).
    callback(event, info) runs after every "step" and "epoch". force: train even if recorded.
    """
    cfg = TrainConfig.from_dict(config.to_dict() if isinstance(config, TrainConfig) else config)
    run_hash = config_hash(cfg)
    rec = None if force else load_record(run_hash, records)
    if rec is not None:
        return rec
    # a collect trains no run of the store: it goes in the queue. A run into a folder of its own (a
    # notebook's scratch check, e.g. Mixer Figure 4's 50 fp32 updates) is no book run: it trains
    scratch = records is not None and records_dir(records).resolve() != records_dir().resolve()
    if runqueue.collecting() and not scratch:
        runqueue.note([cfg], weights=[run_hash])
        raise runqueue.Collected(f"run {run_hash}: not recorded; the notebook stops here in collect mode")
    check_writable(records_dir(records), "run records")  # before training, not after
    for dep in cfg.loads:  # a teacher or start point missing from the
        d = (load_record(dep, records) or {}).get("config", {})  # cache is retrained now, not inside this run
        same_data = (d.get("dataset"), d.get("img_size")) == (cfg.dataset, cfg.img_size)
        _final_state(dep, records, cache, data if same_data else None)
    return _fit(cfg, run_hash, data, records, cache, progress, callback, workers)


def load_weights(run_hash: str, *, records=None, cache=None, data=None, progress=None) -> nn.Module:
    """The final weights of a finished run, in eval mode; retrained if the cache is empty."""
    state, rec = _final_state(run_hash, records, cache, data, progress)
    model = build_model(rec["config"]["model"], {**rec["config"]["model_options"], "num_classes": rec["num_classes"]})
    model.load_state_dict(state)
    return model.eval()


@contextlib.contextmanager
def record_threads(rec: dict):
    """Torch threads set to those a record trained with (the bits of a run depend on them)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(rec.get("machine", {}).get("torch_threads") or threads)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _final_state(run_hash: str, records=None, cache=None, data=None, progress=None):
    """(state_dict, record) of a finished run; its model.pt is rebuilt by training the run again if
    the cache lacks it (same config, machine type and threads -> the same weights)."""
    rec = load_record(run_hash, records)
    path = run_cache(run_hash, cache) / "model.pt"
    if runqueue.collecting() and (rec is None or not path.exists()):  # a collect trains nothing, not even a rebuild
        runqueue.note(weights=[run_hash])
        raise runqueue.Collected(f"run {run_hash}: weights needed; the notebook stops here in collect mode")
    if rec is None or rec["status"] != "ok":
        raise ValueError(f"run {run_hash}: no record with status ok in {records_dir(records)}; train it first")
    state = _load(path) if path.exists() else None
    if state is None:
        print(f"run {run_hash}: its weights are not in the cache {path.parent}; training it again to rebuild them",
              flush=True)
        caps = record_isa_caps(rec) if data is None else {}
        if caps:  # torch reads ISA caps when it starts: the rebuild runs in a process started with them
            print(f"run {run_hash}: rebuilt with the kernels of its record's CPU ({caps})", flush=True)
            run_capped(caps, _REBUILD, run_hash, str(records_dir(records)), str(cache_dir(cache)))
        else:
            with record_threads(rec):
                again = _fit(TrainConfig.from_dict(rec["config"]), run_hash, data, records, cache, progress, None, 0,
                             write_record=False)
            keep_rebuild(run_hash, _note_rebuild(rec, again, path.with_name(REBUILT)), records)
        state = torch.load(path, map_location="cpu", weights_only=True)
    return state, rec


_REBUILD = ("import sys; from vitmlp.train.trainer import _final_state; "
            "_final_state(sys.argv[1], sys.argv[2], sys.argv[3])")


def run_capped(caps: dict, code: str, *args: str) -> None:
    """Run python ``code`` with ``args`` in a child process started under ISA ``caps``."""
    subprocess.run([sys.executable, "-c", code, *args], env={**os.environ, **caps}, check=True)


def record_isa_caps(rec: dict) -> dict:
    """The ISA caps under which this machine rebuilds a CPU record's weights as its CPU computed them
    (:func:`vitmlp.records.isa_caps`); {} if none are needed or none can help (the rebuild is then flagged)."""
    on_cpu = rec.get("device") == "cpu" and not (torch.cuda.is_available() and rec["config"].get("device") != "cpu")
    caps = (isa_caps(rec.get("machine", {}).get("cpu_isa")) or {}) if on_cpu else {}
    # already under them (the rebuilding process itself): never start another
    return {} if all(os.environ.get(k) == v for k, v in caps.items()) else caps


REBUILT = "rebuilt.json"  # beside a model.pt trained again from its record's config, not by the run itself
PROGRESS = "progress.json"  # the epochs a run under way has done, beside its checkpoint


def _what_trained(rec: dict) -> dict:
    return {"hardware": hardware_kind(rec.get("machine")), "precision": rec.get("precision"),
            "torch_threads": rec.get("machine", {}).get("torch_threads"), "device": rec.get("device"),
            "final_top1": rec.get("metrics", {}).get("final_top1")}


def _note_rebuild(rec: dict, again: dict, path) -> dict:
    """Say where a run's weights were rebuilt, beside them (the runs that load them record it): on
    other hardware or in another precision they are not the weights the record's numbers describe."""
    note = {"rebuilt": _what_trained(again), "record": _what_trained(rec), "created": again["created"],
            "profile": rec["config"]["profile"]}
    loads = TrainConfig.from_dict(rec["config"]).loads
    if loads:  # the teacher / start point this rebuild loaded: the record may have loaded other weights of them
        note["loaded"] = {h: (again.get("rebuilt_weights") or {}).get(h) for h in loads}   # None: the run's own
    atomic_write_json(path, note)
    new, old = ("{hardware}, {precision}, {torch_threads} thread(s)".format(**note[k]) for k in ("rebuilt", "record"))
    if new != old:
        warnings.warn(f"run {rec['hash']}: weights rebuilt on {new} (top-1 {note['rebuilt']['final_top1']}); its "
                      f"record trained on {old} (top-1 {note['record']['final_top1']}): the rebuilt weights are "
                      "close to, not the same as, those its numbers describe", stacklevel=2)
    return note


def rebuilt_weights(run_hash: str, cache=None) -> dict | None:
    """Where the cached weights of ``run_hash`` were rebuilt (:data:`REBUILT`), or None if they are the run's own."""
    p = run_cache(run_hash, cache) / REBUILT
    return json.loads(p.read_text()) if p.exists() else None


# points of val top-1: device noise between a record and its rebuild stays within ~1 (results/runs/rebuilds);
# a rebuild further off took another trajectory, and its weights do not stand for the recorded run
REBUILD_TOLERANCE = 2.0


def rebuild_gap(note: dict | None) -> float:
    """How far (points of val top-1) a rebuild (its :func:`rebuilt_weights` note) lands from its record;
    0 for the run's own weights (no note)."""
    return 0.0 if note is None else abs(note["rebuilt"]["final_top1"] - note["record"]["final_top1"])


@contextlib.contextmanager
def no_tf32(enabled: bool = True):
    """fp32 means fp32 on a GPU too: cuDNN convolutions default to TF32 (a 10-bit mantissa), which
    would blur the appendix's fp32-vs-bf16 check. Restored on the way out."""
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    if enabled:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags


# glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD, in the order they must be set (see keep_freed_memory)
_MALLOPT = ((-3, 32 << 20), (-1, 2**31 - 1))


def keep_freed_memory() -> bool:
    """Let glibc keep what a training step frees for the next step, instead of handing blocks of
    activations back to the kernel and page-faulting them in again (~75k faults/s per 1-thread run on
    a 2-core AVX2 EPYC). Paired there, 1 thread: ViT-S compiled 189 -> 263 img/s idle, 113 -> 151
    beside two trainings; ResMLP-S12 eager 406 -> 583 idle; ViT-S eager unchanged idle, +11 % beside
    trainings. Both settings are needed: the trim threshold alone turns off glibc's adaptive mmap
    threshold and halved the rate. Process-wide and left on: an allocator policy that changes no
    number. False where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return all([mallopt(option, value) == 1 for option, value in _MALLOPT])


def _load(path):
    """A checkpoint's contents, or None after setting an unreadable file aside (it is rebuilt)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, empty, not a zip, refused by weights_only ...
        set_aside(path, "unreadable checkpoint", e)
        return None


def _fit(cfg, run_hash, data, records, cache, progress, callback, workers, write_record=True) -> dict:
    """Train one run from its checkpoint (or from the start) to its record."""
    keep_freed_memory()
    run = _Run(cfg, run_hash, data, records, cache, workers)
    ckpt = run_cache(run_hash, cache) / "last.pt"
    clean_stale_tmp(ckpt.parent)
    st = run.resume(ckpt)
    run.say_progress(st, ckpt)
    show = (progress if progress is not None else os.environ.get("VITMLP_PROGRESS", "1") != "0") and run.rank == 0
    bar = tqdm(total=run.total, initial=st.step, disable=not show, desc=f"{cfg.model} {run_hash[:8]}")
    det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    run.t_start = time.perf_counter()
    try:
        with StopOnSignal() as stop, no_tf32(not run.bf16):
            for epoch in range(st.epoch, run.epochs):
                run.train_epoch(st, epoch, stop, bar, callback, ckpt)
                if st.crash:
                    break
                top1 = run.end_epoch(st, epoch)
                if epoch + 1 < run.epochs:
                    run.save_ckpt(st, ckpt)
                    run.say_progress(st, ckpt)
                bar.set_postfix(loss=f"{st.curves['train_loss'][-1]:.3f}", top1=top1)
                if callback:
                    callback("epoch", {"epoch": epoch + 1, "step": st.step, "val_top1": top1})
    finally:
        bar.close()
        torch.use_deterministic_algorithms(det)
    return run.finish(st, ckpt, write_record)


class _Run:
    """One training run's parts, built in a fixed order (the random streams depend on it): data,
    model (+ ``init_from``, trainable subset, teacher), process group, optimiser and schedule,
    augmentation and loss, precision."""

    def __init__(self, cfg, run_hash, data, records, cache, workers):
        self.cfg, self.run_hash, self.records, self.workers = cfg, run_hash, records, workers
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
        self.device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_cuda else "cpu")
        if cfg.batch_size % self.world:
            raise ValueError(f"batch_size {cfg.batch_size} is not divisible by the {self.world} DDP processes")
        self._data(data)
        self._model(records, cache)
        self.made_group = self.world > 1 and not dist.is_initialized()  # after every check that may refuse the run
        if self.made_group:
            dist.init_process_group("nccl" if use_cuda else "gloo")
        self.rank, self.lb = (dist.get_rank() if self.world > 1 else 0), cfg.batch_size // self.world  # local batch
        self.model.to(self.device)
        if self.device.type == "cpu":  # timm's fused kernel is the slower one on a CPU at small head dims
            from ..models.registry import fused_attention
            fused_attention(self.model, False)
        net = nn.parallel.DistributedDataParallel(self.model) if self.world > 1 else self.model
        self.net = torch.compile(net) if cfg.compile else net
        self._optimiser()
        self._loss_and_precision()

    def _data(self, data):
        cfg = self.cfg
        shuffle = pixel_shuffle(cfg)
        self.train_d, self.val_d = (Batches(d, n, augment=cfg.augment != "none", shuffle=shuffle)
                                    for d, n in zip(data or build_data(cfg), (cfg.train_size, cfg.val_size)))
        self.per_epoch = len(self.train_d) // cfg.batch_size
        if self.per_epoch == 0:
            raise ValueError(f"batch_size {cfg.batch_size} exceeds the {len(self.train_d)} training examples")
        self.total = cfg.steps or cfg.epochs * self.per_epoch
        self.epochs = math.ceil(self.total / self.per_epoch)   # trained; the schedule spans self.total updates
        if cfg.stop_epoch:  # a probe of the schedule's first epochs (a crash sweep): the lr as in the whole run
            self.epochs = min(self.epochs, cfg.stop_epoch)
        self.num_classes = cfg.model_options.get("num_classes") or self.train_d.num_classes
        if self.num_classes is None:
            raise ValueError("cannot tell the number of classes: give model_options={'num_classes': ...}")

    def _model(self, records, cache):
        cfg = self.cfg
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank
        self.model = model = build_model(cfg.model, {**cfg.model_options, "num_classes": self.num_classes})
        self.skipped = _init_from(model, cfg.init_from, records, cache) if cfg.init_from else None
        if cfg.trainable:
            names = [n for n, _ in model.named_parameters()]
            if not any(f in n for n in names for f in cfg.trainable):
                raise ValueError(f"trainable={list(cfg.trainable)} matches no parameter name, e.g. {names[:5]}")
            for n, p in model.named_parameters():
                p.requires_grad_(any(f in n for f in cfg.trainable))
        self.teacher = load_weights(cfg.teacher, records=records, cache=cache).to(self.device) if cfg.teacher else None
        self.rebuilt = {h: r for h in cfg.loads if (r := rebuilt_weights(h, cache))}
        self.t_size = load_record(cfg.teacher, records)["config"]["img_size"] if self.teacher else None

    def _optimiser(self):
        cfg = self.cfg
        opt = create_optimizer_v2(self.model, opt=cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay,
                                  momentum=cfg.momentum)
        self.opt = SAM(opt, cfg.sam_rho) if cfg.sam_rho else opt
        # per-update schedule; the lr is a pure function of the step: no scheduler state to checkpoint
        self.sched, _ = create_scheduler_v2(
            self.opt, sched=cfg.sched, num_epochs=self.total, step_on_epochs=False, updates_per_epoch=1,
            warmup_epochs=round(cfg.warmup_epochs * self.per_epoch), warmup_lr=cfg.warmup_lr, min_lr=cfg.min_lr,
            decay_epochs=cfg.decay_epochs * self.per_epoch, decay_rate=cfg.decay_rate)

    def _loss_and_precision(self):
        cfg = self.cfg
        self.mixup = Mixup(mixup_alpha=cfg.mixup, cutmix_alpha=cfg.cutmix, label_smoothing=cfg.label_smoothing,
                           num_classes=self.num_classes) if cfg.mixup or cfg.cutmix else None
        self.criterion = SoftTargetCrossEntropy() if self.mixup else nn.CrossEntropyLoss(
            label_smoothing=cfg.label_smoothing)
        self.erase = RandomErasing(cfg.random_erasing, mode="pixel", device=self.device) if cfg.random_erasing else None
        native = native_bf16(self.device)
        if cfg.precision == "bf16" and not native:  # emulated bf16 ran ~14x slower than fp32 (AVX2-only CPU)
            raise ValueError(f"precision='bf16' on {cpu_capability()['isa']} hardware without native bf16; "
                             "use precision='auto' (bf16 where native, else fp32) or 'fp32'")
        self.bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and native)

    def amp(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    # --- one update ----------------------------------------------------------------------------
    def loss_of(self, x, target, t_logits):
        cfg = self.cfg
        with self.amp():
            out = self.net(x)
            loss = self.criterion(out, target)
            if t_logits is not None:
                loss = (1 - cfg.distill_alpha) * loss + cfg.distill_alpha * _distill_loss(cfg, out, t_logits)
        return loss.float()

    def step(self, x, y, gen):
        """One update; returns the loss before it."""
        cfg, opt = self.cfg, self.opt
        x, y = self.train_d.inputs(x, y, self.device, gen)
        x, target = self.mixup(x, y) if self.mixup else (x, y)
        x = self.erase(x) if self.erase else x
        with torch.no_grad():
            t_logits = self.teacher(x if self.t_size == cfg.img_size else F.interpolate(
                x, size=self.t_size, mode="bilinear", antialias=True)).float() if self.teacher else None
        loss = self.loss_of(x, target, t_logits)
        loss.backward()
        if cfg.sam_rho:  # the gradient that counts is taken at the worst point nearby
            opt.ascent()
            opt.zero_grad()
            self.loss_of(x, target, t_logits).backward()
        if cfg.clip_grad:
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_grad)
        opt.descent() if cfg.sam_rho else opt.step()
        opt.zero_grad()
        return loss.detach()

    # --- epochs --------------------------------------------------------------------------------
    def train_epoch(self, st: RunState, epoch: int, stop, bar, callback, ckpt) -> None:
        """The updates of ``epoch`` from ``st.batch`` on; sets ``st.crash`` on divergence, saves a
        checkpoint and raises KeyboardInterrupt when asked to stop."""
        cfg = self.cfg
        if not st.batch:
            seed_all((cfg.seed * 1_000_003 + epoch) * 1024 + self.rank)
        order = epoch_batches(len(self.train_d), cfg.batch_size, cfg.seed, epoch, cfg.repeated_aug)
        mine = order[st.batch:min(self.per_epoch, self.total - epoch * self.per_epoch),
                     self.rank * self.lb:(self.rank + 1) * self.lb]
        self.net.train()
        t0 = time.perf_counter()
        every = 1 if self.world > 1 or callback else LOSS_SYNC.get(self.device.type, 1)
        pending = []
        for x, y in self.train_d(mine, self.workers):
            self.sched.step_update(st.step)
            gen = torch.Generator().manual_seed((cfg.seed * 1_000_003 + st.step) * 1024 + self.rank)
            pending.append(self.step(x, y, gen))
            st.step, st.batch, st.images = st.step + 1, st.batch + 1, st.images + cfg.batch_size
            stop_now = stop.flag
            if len(pending) == every or stop_now:
                stop_now = self.account(st, epoch, pending, stop_now, bar, callback)
                pending = []
            if st.crash:
                break
            if stop_now:
                st.train_time += time.perf_counter() - t0   # the part of the epoch done counts too
                self.save_ckpt(st, ckpt)
                raise KeyboardInterrupt(f"run {self.run_hash} stopped at step {st.step}; checkpoint saved")
        if pending:
            self.account(st, epoch, pending, False, bar, callback)
        st.train_time += time.perf_counter() - t0

    def account(self, st: RunState, epoch: int, losses: list, flag: bool, bar, callback) -> bool:
        """Book the losses of the last ``len(losses)`` steps in order: running mean, divergence
        (``st.crash``, with the counters put back to the step that crashed), progress; returns whether
        any rank was asked to stop. One read-back for them all, so a GPU is not waited for each step."""
        cfg = self.cfg
        values = torch.stack(losses).tolist() if self.world == 1 else None
        for i, t in enumerate(losses):
            loss, flag = (values[i], flag) if values is not None else _reduce(t, flag, self.world)
            step = st.step - len(losses) + i         # this loss's update, counted from 0
            st.first_loss = st.first_loss or loss
            too_big = loss > cfg.diverge_factor * max(st.first_loss, math.log(self.num_classes))
            st.loss_sum, st.loss_n, st.bad = st.loss_sum + loss, st.loss_n + 1, st.bad + 1 if too_big else 0
            if not math.isfinite(loss) or st.bad >= cfg.diverge_steps:
                st.crash = {"step": step, "epoch": epoch, "loss": loss if math.isfinite(loss) else str(loss),
                            "reason": "loss not finite" if not math.isfinite(loss)
                            else f"loss > {cfg.diverge_factor:g} x initial for {cfg.diverge_steps} steps"}
                later = len(losses) - 1 - i          # updates made after the crash: not counted
                st.step, st.batch, st.images = st.step - later, st.batch - later, st.images - later * cfg.batch_size
                return flag
            bar.update()
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            if callback:
                callback("step", {"epoch": epoch, "step": step + 1, "loss": loss})
        return flag

    def end_epoch(self, st: RunState, epoch: int):
        """Evaluate (when due), append the epoch's curves, start the next epoch; returns the top-1."""
        top1, vloss = None, None
        if (epoch + 1) % self.cfg.eval_every == 0 or epoch + 1 == self.epochs:
            top1, vloss = evaluate(self.model, self.val_d, self.cfg.batch_size, self.rank, self.world, self.device,
                                    self.amp, self.workers)
            if st.best_top1 is None or top1 > st.best_top1:
                st.best_top1, st.best_epoch = top1, epoch + 1
        for k, v in zip(st.curves, (epoch + 1, st.loss_sum / max(st.loss_n, 1), self.opt.param_groups[0]["lr"],
                                    top1, vloss)):
            st.curves[k].append(v)
        st.epoch, st.batch, st.loss_sum, st.loss_n = epoch + 1, 0, 0.0, 0
        return top1

    # --- checkpoints and the record ----------------------------------------------------------------
    def resume(self, ckpt) -> RunState:
        ck = _load(ckpt) if ckpt.exists() else None
        if ck is None:
            return RunState()
        self.model.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["optimizer"])
        st = RunState(**ck["state"])
        if st.batch:  # stopped mid-epoch: continue the random streams where they were
            set_rng(ck["rng"])
        return st

    def say_progress(self, st: RunState, ckpt) -> None:
        """The epochs done, beside the checkpoint: the bar of a pool that trains this run in a worker reads it."""
        if self.rank == 0:
            atomic_write_json(ckpt.with_name(PROGRESS), {"epoch": st.epoch, "epochs": self.epochs})

    def save_ckpt(self, st: RunState, ckpt) -> None:
        if self.rank == 0:
            state = {**dataclasses.asdict(st), "wall": st.wall + time.perf_counter() - self.t_start}
            atomic_torch_save({"model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                               "rng": rng_state(), "state": state}, ckpt)

    def finish(self, st: RunState, ckpt, write_record: bool) -> dict:
        rec = _record(self.cfg, self.run_hash, st, st.wall + time.perf_counter() - self.t_start, self.num_classes,
                      self.model, self.world, self.device)
        rec["precision"] = "bf16" if self.bf16 else "fp32"
        rec["init_skipped"] = self.skipped
        if self.rebuilt:  # the teacher / start point whose weights were not the run's own
            rec["rebuilt_weights"] = self.rebuilt
        if self.rank == 0:
            if st.crash is None:
                atomic_torch_save(self.model.state_dict(), ckpt.with_name("model.pt"))
                if write_record:  # the run's own weights now, not a rebuild
                    ckpt.with_name(REBUILT).unlink(missing_ok=True)
            if write_record:
                save_record(rec, self.records)
            ckpt.unlink(missing_ok=True)
            ckpt.with_name(PROGRESS).unlink(missing_ok=True)
        if self.world > 1:
            dist.barrier()  # the other ranks may read what rank 0 just wrote
            if self.made_group:
                dist.destroy_process_group()
        return rec


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively: a CUDA GPU that supports it, or a CPU whose oneDNN
    has bf16 kernels (AVX-512 BF16 / AMX). On an AVX2-only CPU bf16 autocast runs ~14x slower."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _record(cfg, run_hash, st, wall, num_classes, model, world, device) -> dict:
    c = st.curves
    evals = [(t, v) for t, v in zip(c["val_top1"], c["val_loss"]) if t is not None]
    return {"hash": run_hash, "config": cfg.to_dict(), "profile": cfg.profile,
            "status": "crash" if st.crash else "ok", "crash": st.crash, "num_classes": num_classes,
            "metrics": {"final_top1": evals[-1][0] if evals else None, "final_val_loss": evals[-1][1] if evals else None,
                        "best_top1": st.best_top1, "best_epoch": st.best_epoch,
                        "final_train_loss": c["train_loss"][-1] if c["train_loss"] else None,
                        "epochs": st.epoch, "steps": st.step},
            "curves": c, "params": sum(p.numel() for p in model.parameters()),
            "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "wall_time_s": wall, "train_time_s": st.train_time,
            "images_per_s": st.images / st.train_time if st.train_time else None,
            "world_size": world, "device": str(device),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **provenance()}


@torch.no_grad()
def evaluate(model, data, batch, rank, world, device, amp, workers):
    """Top-1 (%) and mean loss over the val set; each rank takes every world-th example."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)   # on the device: one read-back at the end
    for x, y in data(list(torch.arange(rank, len(data), world).split(batch)), workers):
        x, y = data.inputs(x, y, device)
        with amp():
            out = model(x).float()
        sums += torch.stack([(out.argmax(-1) == y).sum().double(), F.cross_entropy(out, y, reduction="sum").double(),
                             torch.tensor(len(y), dtype=torch.float64, device=device)])
    if world > 1:
        dist.all_reduce(sums)
    right, loss, n = sums.tolist()
    return 100 * right / n, loss / n


def _distill_loss(cfg, out, t_logits):
    if cfg.distill == "hard":  # DeiT hard distillation: the teacher's argmax is the label
        return F.cross_entropy(out, t_logits.argmax(-1))
    tau = cfg.distill_tau
    return F.kl_div(F.log_softmax(out / tau, -1), F.log_softmax(t_logits / tau, -1), reduction="batchmean",
                    log_target=True) * tau * tau


def _init_from(model, run_hash, records, cache) -> list[str]:
    """Load a finished run's weights. A model may define ``adapt_state_dict(sd)`` for its own
    resizing rules; position embeddings are resampled to the new grid; other mismatched or
    unknown tensors (e.g. a head for other classes) keep their fresh init and are returned."""
    src = load_weights(run_hash, records=records, cache=cache).state_dict()
    src = model.adapt_state_dict(src) if hasattr(model, "adapt_state_dict") else src
    own, keep, skipped = model.state_dict(), {}, []
    for k, v in src.items():
        if k in own and v.shape != own[k].shape and k.endswith("pos_embed") and v.ndim == 3:
            prefix = 0 if getattr(model, "no_embed_class", False) else getattr(model, "num_prefix_tokens", 0)
            side = math.isqrt(own[k].shape[1] - prefix)
            v = resample_abs_pos_embed(v, [side, side], num_prefix_tokens=prefix)
        if k in own and v.shape == own[k].shape:
            keep[k] = v
        else:
            skipped.append(k)
    model.load_state_dict(keep, strict=False)
    return skipped


def _reduce(loss, flag, world):
    """Mean loss over ranks and whether any rank was asked to stop (one all-reduce per step)."""
    if world == 1:
        return loss.item(), flag
    t = torch.tensor([loss.item(), float(flag)], dtype=torch.float64)
    dist.all_reduce(t)
    return t[0].item() / world, bool(t[1] > 0)
