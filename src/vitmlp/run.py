"""Execute notebooks with papermill: one item, one chapter, one table across papers, or all.

    python -m vitmlp.run --item table3 --paper resmlp --profile cpu

Executed copies go to ``book/<paper>/`` (the book renders them) only when the run succeeds.
At other profiles than the book's (``cpu``), or with other weights than the book's own
(``-p weights timm``), executed copies go to ``$VITMLP_OUT`` (default a temporary folder) and
results to ``results/profiles/<profile>[-<weights>-weights]/`` (unless ``$VITMLP_RESULTS`` is
set), so they never overwrite the book's numbers. Parameters are checked against the
notebook's ``parameters`` cell before anything runs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import papermill as pm

from .results import REPO

NOTEBOOKS = REPO / "notebooks"
BOOK_PROFILE = "cpu"


def find(paper: str | None = None, item: str | None = None) -> list[Path]:
    """Notebooks under notebooks/<paper>/, filtered by chapter and/or item slug (``table3``)."""
    papers = sorted(p.name for p in NOTEBOOKS.iterdir() if p.is_dir())
    if paper and paper not in papers:
        raise SystemExit(f"unknown paper {paper!r}; valid choices: {', '.join(papers)}")
    nbs = sorted(NOTEBOOKS.glob(f"{paper or '*'}/*.ipynb"))
    if item:
        # a notebook's stem starts with the items it makes: "table2+figure4_external"
        nbs = [nb for nb in nbs if item in nb.stem.split("_")[0].split("+") or nb.stem == item]
    if not nbs:
        raise SystemExit(f"no notebook for paper={paper} item={item}; available: "
                         + ", ".join(f"{p.parent.name}/{p.stem}" for p in sorted(NOTEBOOKS.glob('*/*.ipynb'))))
    return nbs


def check_parameters(nb: Path, params: dict) -> None:
    """Refuse parameters the notebook does not declare (papermill would only warn)."""
    declared = pm.inspect_notebook(str(nb))
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise SystemExit(f"{nb.relative_to(REPO)}: unknown parameter(s) {unknown}; "
                         f"valid: {', '.join(declared)}")


def execute(nb: Path, params: dict, out_dir: Path) -> Path:
    check_parameters(nb, params)
    out = out_dir / nb.parent.name / nb.name
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_out = Path(tmp) / nb.name
        t0 = time.time()
        pm.execute_notebook(str(nb), str(tmp_out), parameters=params, cwd=str(nb.parent),
                            progress_bar=False, kernel_name="python3")
        compact(tmp_out)
        shutil.move(tmp_out, out)  # only a successful run replaces the book's copy
    print(f"{nb.relative_to(REPO)}: {time.time() - t0:.0f} s -> {out}", flush=True)
    return out


def compact(path: Path) -> None:
    """Keep only the last frame of each progress bar in a notebook's stream outputs (a terminal
    shows the same): consecutive outputs of one stream are joined, ``\r``-overwritten text dropped."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        merged = []
        for o in cell.get("outputs", []):
            if merged and o.output_type == "stream" and merged[-1].output_type == "stream" \
                    and merged[-1].name == o.name:
                merged[-1].text += o.text
            else:
                merged.append(o)
        for o in merged:
            if o.output_type == "stream":
                o.text = "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in o.text.split("\n"))
        if "outputs" in cell:
            cell.outputs = merged
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paper")
    ap.add_argument("--item", help="notebook stem or item slug, e.g. table3")
    ap.add_argument("--profile", default=BOOK_PROFILE)
    ap.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="extra notebook parameter (YAML value)")
    args = ap.parse_args(argv)
    import yaml
    params = {"profile": args.profile, **{k: yaml.safe_load(v) for k, v in args.param}}
    # the book shows the cpu profile on its own trained weights; anything else goes beside it
    weights = params.get("weights", "book")
    book_run = args.profile == BOOK_PROFILE and weights == "book"
    out_dir = Path(os.environ.get("VITMLP_OUT") or (REPO / "book" if book_run else tempfile.mkdtemp()))
    if not book_run:
        where = args.profile if weights == "book" else f"{args.profile}-{weights}-weights"
        os.environ.setdefault("VITMLP_RESULTS", str(REPO / "results" / "profiles" / where))
    for nb in find(args.paper, args.item):
        execute(nb, params, out_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
