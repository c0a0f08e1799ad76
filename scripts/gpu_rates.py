"""Images/s of the reduced models on a GPU, eager vs torch.compile, one run and N runs at once
(the queue runner's way): which mode the next GPU call should train in.

    PYTHONPATH=src python scripts/gpu_rates.py --steps 300 --parallel 14 --models vit_S mixer_S16
"""
import argparse
import json
import os
import sys
import tempfile
import time

try:
    import fvcore  # noqa: F401  (bench imports it for MAC counts; a GPU machine may lack it, the rates do not)
except ImportError:
    import types
    sys.modules["fvcore"], sys.modules["fvcore.nn"] = types.ModuleType("fvcore"), types.ModuleType("fvcore.nn")
    sys.modules["fvcore.nn"].FlopCountAnalysis = None
from vitmlp.bench import parallel_rate, steady_rate
from vitmlp.profiles import run_config
from vitmlp.records import machine


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--parallel", type=int, default=14)
    ap.add_argument("--models", nargs="+", default=["vit_S"])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            base = run_config("cpu", name, steps=a.steps, eval_every=10**6)
            for n in (1, a.parallel):
                for compile in (False, True):
                    t0 = time.time()
                    cfg = base.replace(compile=compile)
                    own = f"{tmp}/{name}-{n}-{compile}"
                    rate, precision = steady_rate(cfg, own) if n == 1 else parallel_rate(cfg, own, n)
                    rows.append({"machine": machine(), "model": name, "runs": n, "compile": compile, "precision": precision,
                                 "images_per_s": round(rate), "wall_s": round(time.time() - t0)})
                    print({k: v for k, v in rows[-1].items() if k != "machine"}, flush=True)
                    with open(f"{a.out}/gpu_rates.json", "w") as f:
                        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
