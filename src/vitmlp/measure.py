"""Parameters, FLOPs, peak memory and throughput, in the papers' conventions.

The papers count FLOPs as multiply-adds ("GFLOPs" = GMACs) with fvcore, the counter of the DeiT
code base: linear layers, convolutions, the two attention matmuls and normalisation layers;
activations and softmax are not counted. ViT-B/16 gives 17.58 G, the value printed by
"Three things" Table 7 (torch's FlopCounterMode, which skips norms, gives 17.56).
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
import warnings

import torch
import torch.nn as nn

from .models.registry import fused_attention


def count_params(model: nn.Module, exclude: tuple[str, ...] = ()) -> int:
    """Number of parameters, leaving out those whose name starts with a prefix in ``exclude``
    (e.g. ``("head.",)``: Mixer's Table 1 counts exclude the classifier)."""
    return sum(p.numel() for n, p in model.named_parameters() if not n.startswith(exclude))


@contextlib.contextmanager
def _explicit_attention(model: nn.Module):
    # timm's fused SDPA kernel can hide the attention matmuls from counters: use the explicit path.
    mods = fused_attention(model, False)
    try:
        yield
    finally:
        for m in mods:
            m.fused_attn = True


@torch.no_grad()
def count_macs(model: nn.Module, img_size: int | tuple[int, int] = 224, in_chans: int = 3) -> int:
    """Multiply-adds of one forward pass on one image, counted by fvcore."""
    from fvcore.nn import FlopCountAnalysis   # here: a GPU machine may lack fvcore, and only this needs it
    h, w = (img_size, img_size) if isinstance(img_size, int) else img_size
    was_training = model.training
    model.eval()
    with _explicit_attention(model), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # jit-trace chatter
        analysis = FlopCountAnalysis(model, torch.zeros(1, in_chans, h, w))
        analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        total = analysis.total()
    model.train(was_training)
    return int(total)


@torch.no_grad()
def peak_inference_memory_mb(model: nn.Module, batch: int, img_size: int = 224, in_chans: int = 3) -> float:
    """Peak memory of a forward pass in MB: CUDA allocator peak on a GPU, otherwise the peak
    of live tensors tracked by the CPU profiler (model weights included, as in the papers)."""
    x = torch.randn(batch, in_chans, img_size, img_size)
    model.eval()
    if torch.cuda.is_available():
        model, x = model.cuda(), x.cuda()
        torch.cuda.reset_peak_memory_stats()
        model(x)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    weights = _tensor_bytes([*model.parameters(), *model.buffers()])
    return (weights + _cpu_peak_above_live(lambda: model(x)) + _tensor_bytes([x])) / 2**20


@torch.no_grad()
def throughput(model: nn.Module, batch: int, img_size: int = 224, in_chans: int = 3,
               warmup: int = 2, min_time: float = 2.0, long_batch: float = 10.0) -> float:
    """Inference images per second at a fixed batch size: total images / total time of the
    forwards repeated for at least ``min_time`` seconds after ``warmup`` forwards.

    A warm-up forward longer than ``long_batch`` seconds is counted as a measurement and ends the
    warm-up: eager one-time costs (allocations, kernel choice) are milliseconds, noise against such
    a batch, while a second forward would double the cost of measuring the largest models."""
    _not_in_collect()
    model.eval()
    x = torch.randn(batch, in_chans, img_size, img_size)
    n, elapsed = 0, 0.0
    for _ in range(warmup):
        t0 = time.perf_counter()
        model(x)
        if (dt := time.perf_counter() - t0) > long_batch:
            n, elapsed = batch, dt
            break
    t0 = time.perf_counter() - elapsed
    while (elapsed := time.perf_counter() - t0) < min_time or n == 0:
        model(x)
        n += batch
    return n / elapsed


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@contextlib.contextmanager
def _quiet_fd2():
    # the profiler's C++ side writes start/stop lines to file descriptor 2 itself (not sys.stderr),
    # which would land on the book's pages as stderr; errors still raise in Python
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _cpu_peak_above_live(fn) -> int:
    """Bytes: peak of the running sum of the allocations and frees made while ``fn()`` runs, read
    from the profiler's raw memory records (an op's ``cpu_memory_usage`` also holds its children's,
    so summing over ops would count nested allocations twice)."""
    from torch.profiler import ProfilerActivity, profile
    gc.collect()
    with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    records = sorted((e for e in prof.profiler.kineto_results.events()
                      if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU),
                     key=lambda e: e.start_ns())
    live = peak = 0
    for e in records:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def train_step_cost(model: nn.Module, batch: int, img_size: int = 224, *, trainable=None, steps: int = 2,
                    memory: bool = True, in_chans: int = 3, lr: float = 1e-5, seed: int = 0) -> dict:
    """Peak memory and time of one fine-tuning step (forward, backward, AdamW step) of ``model``.

    Only parameters whose name contains one of ``trainable`` (``TrainConfig.trainable``'s rule;
    None: all) require grad, so the frozen ones get neither a gradient nor optimizer state (timm's
    optimizer factory skips them, as in the trainer). One warm-up step creates the optimizer state;
    the next step is the memory step: CUDA allocator peak on a GPU, otherwise weights + buffers +
    optimizer state + batch + the peak of the tensors the step allocates (CPU profiler). Then
    ``steps`` timed steps. Returns ``peak_mem_MB`` (None when ``memory`` is False), ``step_s``
    (seconds of each timed step) and ``trainable_params``."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x, y = _random_batch(model, batch, img_size, in_chans, seed, device)
    step, opt = _fine_tune_step(model, trainable, x, y, lr)
    step()  # warm-up: allocates the optimizer state
    peak = None
    if memory:
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            step()
            peak = torch.cuda.max_memory_allocated()
        else:
            state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
            live = _tensor_bytes([*model.parameters(), *model.buffers(), *state, x, y])
            peak = live + _cpu_peak_above_live(step)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    del opt
    return {"peak_mem_MB": None if peak is None else peak / 2**20, "step_s": times, "trainable_params": n_trainable}


def _random_batch(model, batch, img_size, in_chans, seed, device):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, in_chans, img_size, img_size, generator=g).to(device)
    return x, torch.randint(model.num_classes, (batch,), generator=g).to(device)


def _fine_tune_step(model: nn.Module, trainable, x, y, lr: float):
    """A step function that fine-tunes the parameters named by ``trainable`` (None: all) with its
    own AdamW (timm's factory skips frozen parameters, as the trainer does), and that optimizer."""
    from timm.optim import create_optimizer_v2
    keep = {n: trainable is None or any(f in n for f in trainable) for n, _ in model.named_parameters()}

    def freeze():
        for n, p in model.named_parameters():
            p.requires_grad_(keep[n])
            p.grad = None
    freeze()
    model.to(x.device).train()
    opt = create_optimizer_v2(model, opt="adamw", lr=lr, weight_decay=0.05)

    def step():
        freeze()      # another mode's step may have run in between (paired timings)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if x.device.type == "cuda":
            torch.cuda.synchronize()
    return step, opt


def paired_step_times(model: nn.Module, modes: dict, batch: int, img_size: int = 224, *, rounds: int = 5,
                      in_chans: int = 3, lr: float = 1e-5, seed: int = 0) -> dict[str, list[float]]:
    """Seconds of one fine-tuning step in each of ``modes`` (name -> ``trainable`` rule, None: all),
    timed alternately: a round times one step per mode, in alternating order from round to round,
    after one warm-up step each (it creates the optimizer state), so a change of load on the
    machine hits every mode alike and a ratio between modes is a paired measurement."""
    _not_in_collect()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x, y = _random_batch(model, batch, img_size, in_chans, seed, device)
    steps = {m: _fine_tune_step(model, t, x, y, lr)[0] for m, t in modes.items()}
    for s in steps.values():
        s()
    out = {m: [] for m in modes}
    for r in range(rounds):
        for m in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
            t0 = time.perf_counter()
            steps[m]()
            out[m].append(time.perf_counter() - t0)
    return out


def _not_in_collect() -> None:
    """The book's timing notebooks train nothing: a collect (``python -m vitmlp.runqueue collect``)
    stops them at their first timing instead of spending minutes (of a lent GPU) on it."""
    from . import runqueue
    if runqueue.collecting():
        raise runqueue.Collected("a timing notebook: nothing to train; it stops here in collect mode")


@torch.no_grad()   # inference: no autograd graph (with it, B18x2 at batch 64 took 21 GB and was killed)
def paired_throughput(model: nn.Module, modes: dict, batch: int, img_size: int = 224, in_chans: int = 3,
                      min_time: float = 4.0, max_rounds: int = 20, long_batch: float = 3.0,
                      min_rounds: int = 1) -> dict[str, list[float]]:
    """Inference images/s of ``model`` in each of ``modes`` (name -> function that switches the
    model into that mode), timed alternately at one batch so that a change of load on the machine
    hits every mode alike; a ratio between modes is then a paired measurement.

    A round times one forward per mode, in alternating order from round to round. A first round
    whose forwards are all shorter than ``long_batch`` seconds is a warm-up and not counted (a
    longer one is counted: one-time costs are noise against it). Rounds go on until ``min_time``
    seconds of counted forwards and ``min_rounds`` counted rounds, or ``max_rounds`` rounds. Returns images/s of every counted round
    per mode. On a GPU (if available) the model runs there, synchronised around each forward."""
    _not_in_collect()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device).eval()
    x = torch.randn(batch, in_chans, img_size, img_size, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def seconds(mode):
        modes[mode]()
        sync()
        t0 = time.perf_counter()
        model(x)
        sync()
        return time.perf_counter() - t0

    names = list(modes)
    first = {m: seconds(m) for m in names}
    counted = max(first.values()) >= long_batch
    out = {m: [batch / first[m]] if counted else [] for m in names}
    spent, rounds = (sum(first.values()) if counted else 0.0), int(counted)
    while rounds < max_rounds and (spent < min_time or rounds < min_rounds):
        for m in (names if rounds % 2 == 0 else names[::-1]):  # counted rounds alternate the order
            t = seconds(m)
            out[m].append(batch / t)
            spent += t
        rounds += 1
    return out


class _OneOf(nn.Module):
    """Runs whichever of its models was chosen last: several models timed by :func:`paired_throughput`."""

    def __init__(self, models):
        super().__init__()
        self.models, self.current = nn.ModuleList(models), 0

    def forward(self, x):
        return self.models[self.current](x)


def paired_models_throughput(models: dict[str, nn.Module], batch: int, img_size: int = 224,
                             **kw) -> dict[str, list[float]]:
    """Images/s of each of ``models`` (name -> model, one input size) per round, timed alternately
    as :func:`paired_throughput` times modes: a speed-up between two models is then paired, robust
    to a change of load on a shared machine while they are timed."""
    one = _OneOf(list(models.values()))
    modes = {name: (lambda i=i: setattr(one, "current", i)) for i, name in enumerate(models)}
    return paired_throughput(one, modes, batch, img_size, **kw)
