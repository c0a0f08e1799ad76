"""Re-execute notebooks from the committed run records, training nothing, and compare the numbers
they write with the committed ``results/``: a notebook whose runs (and weights) are all recorded
must give back its tables unchanged.

    .venv/bin/python scripts/check_reexecution.py                 # every notebook
    .venv/bin/python scripts/check_reexecution.py --paper resmlp --item table3

Each notebook runs with the parameters its book page was executed with (papermill records them), in
collect mode (``vitmlp.runqueue.collect``): a run or weights missing from the
records or the checkpoint cache stops it, reported as "not re-executed" with the reason, never trained. Its items go to
a scratch folder; every CSV it wrote is compared cell by cell with the committed file of the same
name. Measured items are timed anew on this machine, so they are listed, not compared.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd

from vitmlp.book import book_root
from vitmlp.records import hardware_kind, isa_caps, load_record, this_hardware
from vitmlp.results import results_dir
from vitmlp.run import find
from vitmlp.runqueue import collect


KEY = ["item", "row", "quantity"]   # exact.csv: a file every exact item of a paper adds its rows to
# columns computed anew on the machine that runs the notebook, not read from records: times, and the
# float error between two implementations (its last bits depend on the CPU and thread count)
ON_MACHINE = ["images/s", "CPU min/run", "max_abs_diff", "diff_in_eps_of_logit"]


def compare(new: Path, old: Path) -> str:
    """'unchanged', 'new file', or how many cells differ, with the first few."""
    if not old.exists():
        return "new file (nothing committed to compare with)"
    a, b = (pd.read_csv(p, dtype=str, keep_default_na=False) for p in (new, old))
    anew = [c for c in ON_MACHINE if c in a.columns]
    if anew:
        a, b = a.drop(columns=anew), b.drop(columns=anew, errors="ignore")
        return _cells(a, b) + f" (computed anew on this machine, not compared: {', '.join(anew)})"
    return _cells(a, b)


def _cells(a: pd.DataFrame, b: pd.DataFrame) -> str:
    if set(KEY) <= set(a.columns) and list(a.columns) == list(b.columns):   # only the rows this notebook wrote
        b = a[KEY].merge(b, on=KEY, how="left").fillna("(not committed)")[list(a.columns)]
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return f"shape or columns differ: {a.shape} {list(a.columns)[:6]} vs {b.shape} {list(b.columns)[:6]}"
    diff = [(i, c, b.at[i, c], a.at[i, c]) for c in a.columns for i in a.index if a.at[i, c] != b.at[i, c]]
    real = [d for d in diff if not _rounding(d[2], d[3])]
    if not real:   # another CPU's floating point: 0.013031061030524796 -> ...793
        return "unchanged" + (f" ({len(diff)} cell(s) differ only in the last digits: floating-point rounding)"
                              if diff else "")
    shown = "; ".join(f"row {i} {c!r}: {was} -> {now}" for i, c, was, now in real[:3])
    return f"{len(real)} cell(s) differ: {shown}"


def _rounding(was: str, now: str) -> bool:
    """Two numbers equal to 1e-6 relative: the same float32 computation rounded by another CPU, thread count or library."""
    try:
        return math.isclose(float(was), float(now), rel_tol=1e-6, abs_tol=1e-12)
    except ValueError:
        return False


def lacking(queue: Path, records=None) -> str:
    """Where the runs whose weights a stopped notebook lacks were trained: a rebuild on the same hardware
    kind has equalled its record (appendix, rebuilds; ``precision="auto"`` resolves as it did), and so has one
    of a narrower CPU's record under its ISA caps (``records.isa_caps``); elsewhere it is close."""
    weights = json.loads(queue.read_text()).get("weights", []) if queue.exists() else []
    if not weights:
        return ""
    here = this_hardware()
    kinds = Counter(hardware_kind(r.get("machine")) if r else "" for r in (load_record(h, records) for h in weights))
    same = kinds.pop(here, 0)
    capped = {k: kinds.pop(k) for k in list(kinds) if isa_caps(k)}   # None for a GPU, a wider CPU, no record
    exact = f"{same} trained on this hardware kind ({here})" + "".join(f", {n} on {k} (rebuilt under its ISA caps)"
                                                                    for k, n in sorted(capped.items()))
    untrained = kinds.pop("", 0)
    away = ", ".join(f"{n} on {k}" for k, n in sorted(kinds.items()))
    parts = ([f"{exact}: rebuilds here have equalled their records"] if same or capped else []) \
        + ([f"{away} (a rebuild here is close to, not equal to, its record)"] if away else []) \
        + ([f"{untrained} with no record yet (not trained)"] if untrained else [])
    return f"lacks the weights of {len(weights)} run(s): " + "; ".join(parts)


def book_parameters(nb: Path) -> dict:
    """The parameters the book's page of ``nb`` was executed with (papermill records them), at ``cpu``."""
    page = book_root() / nb.parent.name / nb.name
    meta = json.loads(page.read_text()).get("metadata", {}).get("papermill", {}) if page.exists() else {}
    return {**meta.get("parameters", {}), "profile": "cpu"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paper")
    ap.add_argument("--item")
    a = ap.parse_args(argv)
    bad = 0
    for nb in find(a.paper, a.item):
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp) / "results"
            stop = collect([nb], book_parameters(nb), Path(tmp) / "queue.json", results=scratch)[str(nb)]
            print(f"{nb.parent.name}/{nb.stem}: "
                  + ("re-executed from the records" if stop == "complete" else f"not re-executed ({stop})"))
            if stop != "complete" and (why := lacking(Path(tmp) / "queue.json")):
                print(f"  {why}")
            for f in sorted(scratch.glob("*/*.csv")):
                if ".measured." in f.name:
                    print(f"  {f.name}: measured anew (not compared)")
                    continue
                verdict = compare(f, results_dir() / f.parent.name / f.name)
                bad += not verdict.startswith("unchanged")
                print(f"  {f.name}: {verdict}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
