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

from vitmlp.bench import timed_rate
from vitmlp.profiles import run_config
from vitmlp.records import machine


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--parallel", type=int, default=14)
    ap.add_argument("--models", nargs="+", default=["vit_S"])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args(argv)
    modes = {"eager": {}, "compile": {"compile": True}, f"eager, {a.parallel} runs": {"parallel": a.parallel},
             f"compile, {a.parallel} runs": {"compile": True, "parallel": a.parallel}}
    rows, where = [], machine()
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            base = run_config("cpu", name, steps=a.steps, eval_every=10**6)
            for mode, changes in modes.items():
                t0 = time.time()
                rate, precision, _ = timed_rate(base, changes, f"{tmp}/{name}-{mode}")
                rows.append({"model": name, "mode": mode, "precision": precision, "images_per_s": round(rate),
                             "wall_s": round(time.time() - t0)})
                print(rows[-1], flush=True)
                with open(f"{a.out}/gpu_rates.json", "w") as f:
                    json.dump({"machine": where, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
