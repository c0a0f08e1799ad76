"""Parameters, FLOPs, peak memory and throughput, in the papers' conventions.

The papers count FLOPs as multiply-adds ("GFLOPs" = GMACs) with fvcore, the counter of the DeiT
code base: linear layers, convolutions, the two attention matmuls and normalisation layers;
activations and softmax are not counted. ViT-B/16 gives 17.58 G, the value printed by
"Three things" Table 7 (torch's FlopCounterMode, which skips norms, gives 17.56).
"""
from __future__ import annotations

import contextlib
import gc
import time
import warnings

import torch
import torch.nn as nn
from fvcore.nn import FlopCountAnalysis

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
    from torch.profiler import ProfilerActivity, profile
    weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model(x)
    # Running sum of allocations/frees in event order gives the activation peak.
    events = sorted((e for e in prof.events() if e.cpu_memory_usage), key=lambda e: e.time_range.start)
    live = peak = 0
    for e in events:
        live += e.cpu_memory_usage
        peak = max(peak, live)
    return (weights + peak + x.numel() * x.element_size()) / 2**20


@torch.no_grad()
def throughput(model: nn.Module, batch: int, img_size: int = 224, in_chans: int = 3,
               warmup: int = 2, min_time: float = 2.0, long_batch: float = 10.0) -> float:
    """Inference images per second at a fixed batch size: total images / total time of the
    forwards repeated for at least ``min_time`` seconds after ``warmup`` forwards.

    A warm-up forward longer than ``long_batch`` seconds is counted as a measurement and ends the
    warm-up: eager one-time costs (allocations, kernel choice) are milliseconds, noise against such
    a batch, while a second forward would double the cost of measuring the largest models."""
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
