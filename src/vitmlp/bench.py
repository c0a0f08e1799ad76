"""``make bench``: how fast the trainer runs here, as ratios measured in one run.

For reference reduced configs (the ``cpu`` profile): training images/s through the real trainer
(data included), the GFLOP/s that reach (training ~ 3 x forward, 2 FLOPs per multiply-add) as a
share of this machine's fp32 matmul peak, eager vs ``torch.compile`` vs bf16 autocast vs two runs at
once (as ``experiment.run`` trains at the ``cpu`` profile), and the share of a step spent producing
the batch. The table is saved to ``results/appendix/bench-<ISA>.csv`` (one per kind of CPU)
(with provenance) for the book's appendix page.
"""
from __future__ import annotations

import argparse
import tempfile
import time

import pandas as pd
import torch

from .experiment import worker_pool
from .measure import count_macs
from .models import create_model
from .profiles import run_config
from .records import cpu_capability, kind_slug
from .results import save_appendix
from .train import Batches, build_data, train

MODELS = {"ViT-S": ("vit_S", {}), "ResMLP-S12": ("resmlp_S12", {}), "Mixer-S/16": ("mixer_S16", {})}
# each mode sets its precision (bf16 only on a CPU that does it natively); the last trains two runs at
# once, one thread each, in the profile's precision, as experiment.run does at the cpu profile: images/s of both
MODES = {"eager fp32": {"precision": "fp32"}, "compile fp32": {"compile": True, "precision": "fp32"},
         "eager bf16": {"precision": "bf16"}, "profile's precision, 2 runs x 1 thread": {"parallel": 2}}


def matmul_peak(n: int = 2048, reps: int = 10) -> float:
    """fp32 GFLOP/s of a large square matmul (the machine's practical peak)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9


def loader_rate(cfg, batches: int = 50) -> float:
    """Images/s of producing training batches alone (index, float, augment, normalise)."""
    train_ds, _ = build_data(cfg)
    d = Batches(train_ds, cfg.train_size, augment=cfg.augment != "none")
    gen = torch.Generator().manual_seed(0)
    idx = [torch.randint(len(d), (cfg.batch_size,), generator=gen) for _ in range(batches)]
    t0 = time.perf_counter()
    for x, y in d(idx):
        d.inputs(x, y, torch.device("cpu"), gen)
    return batches * cfg.batch_size / (time.perf_counter() - t0)


def steady_rate(cfg, tmp: str, warmup: int = 10) -> tuple[float, str]:
    """Training images/s through the real trainer, timed after ``warmup`` steps (compilation), and
    the precision it trained in."""
    stamps = []
    rec = train(cfg, records=f"{tmp}/rec", cache=f"{tmp}/cache", progress=False,
                callback=lambda event, info: stamps.append(time.perf_counter()) if event == "step" else None)
    warmup = min(warmup, len(stamps) // 2)   # short runs (tests) keep half their steps
    return (len(stamps) - 1 - warmup) * cfg.batch_size / (stamps[-1] - stamps[warmup]), rec["precision"]


def parallel_rate(cfg, tmp: str, n: int) -> tuple[float, str]:
    """Images/s of ``n`` runs trained at once in a pool like experiment.run's (summed)."""
    with worker_pool(n) as pool:
        out = list(pool.map(steady_rate, [cfg.replace(seed=i) for i in range(n)], [f"{tmp}/{i}" for i in range(n)]))
    return sum(r for r, _ in out), out[0][1]


def timed_rate(base, changes: dict, tmp: str) -> tuple[float, str, int]:
    """Images/s, precision and run count of ``base`` changed by a mode (``MODES``' entries; a
    ``parallel`` entry trains that many runs at once and sums their rates)."""
    changes = dict(changes)
    n = changes.pop("parallel", 1)
    cfg = base.replace(**changes)
    return (steady_rate(cfg, tmp) if n == 1 else parallel_rate(cfg, tmp, n)) + (n,)


def bench(profile: str = "cpu", steps: int = 60, models=None, modes=None, rounds: int = 3) -> pd.DataFrame:
    """One row per model and mode: the median images/s of ``rounds`` timings, the modes taken in
    turn and in reverse order every other round (a shared VM's load drifts: single passes of the
    same bench disagreed on the sign of compile's gain)."""
    models, modes = models or MODELS, modes or MODES
    if not cpu_capability()["bf16"]:  # emulated bf16 measures nothing a reader would use
        modes = {k: v for k, v in modes.items() if v.get("precision") != "bf16"}
    peak = matmul_peak()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, (name, opts) in models.items():
            base = run_config(profile, name, model_options=opts, steps=steps, eval_every=10**6)
            macs = count_macs(create_model(name, **base.model_options, num_classes=10), base.img_size)
            data_rate = loader_rate(base)
            timed = {mode: [] for mode in modes}
            for r in range(rounds):
                for mode in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
                    # a store per timing: eager and compile runs share a hash
                    timed[mode].append(timed_rate(base, modes[mode], f"{tmp}/{label}-{mode}-{r}"))
            for mode, t in timed.items():
                rates, (_, precision, n) = pd.Series([rate for rate, _, _ in t]), t[0]
                ips = float(rates.median())
                gflops = 3 * 2 * macs * ips / 1e9
                rows.append({"model": label, "mode": mode, "precision": precision, "images_per_s": round(ips, 1),
                             "range": f"{rates.min():.0f}-{rates.max():.0f}",
                             "GFLOP/s": round(gflops, 1), "share_of_peak": round(gflops / peak, 3),
                             "data_share": round(ips / n / data_rate, 3), "MMACs/img": round(macs / 1e6, 1)})
    df = pd.DataFrame(rows)
    df.attrs["matmul_peak_gflops"] = peak
    return df


def bench_name(isa: str) -> str:
    """``bench-avx2``, ``bench-avx512-bf16``, ``bench-amx``: the appendix file of a CPU kind."""
    return "bench-" + kind_slug(isa)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    df = bench(args.profile, args.steps, rounds=args.rounds)
    cap = cpu_capability()
    head = (f"CPU: {cap['isa']}, native bf16: {'yes' if cap['bf16'] else 'no (bf16 mode skipped)'}; fp32 matmul peak: "
            f"{df.attrs['matmul_peak_gflops']:.0f} GFLOP/s, torch threads: {torch.get_num_threads()}")
    print(head)
    print(df.to_string(index=False))
    # one table per kind of CPU (they differ by 2-14x): the appendix shows each beside the others
    save_appendix(bench_name(cap["isa"]), profile=args.profile, source="make bench (vitmlp.bench)", table=df,
                  summary=f"{head}; {args.steps} training steps per timing, the median of {args.rounds} "
                          "rounds that take the modes in alternating order, one run on this machine")


if __name__ == "__main__":
    main()
