"""Execute notebooks with papermill: one item, one chapter, one table across papers, or all.

    python -m vitmlp.run --item table3 --paper resmlp --profile cpu

``--profile`` is the one source of the profile: the runner passes it to every notebook (``-p
profile`` is refused) and it alone decides where things go. At the book's profile (``cpu``) on the
book's own weights, executed copies go to ``book/<paper>/`` and results to ``results/``; at any other
profile, or with other weights (``-p weights timm``), executed copies go to ``$VITMLP_OUT`` (default a
temporary folder) and results to ``results/profiles/<profile>[-<weights>-weights]/`` (unless
``$VITMLP_RESULTS`` is set), so they never overwrite the book's numbers.

Everything is checked before a kernel starts: the profile, each parameter against the notebook's
``parameters`` cell (name and type), and that the output folders can be written. An item is
written whole: the files a notebook saves (CSV, PNG, sidecar) and its executed copy are staged
beside their targets and swapped in together once the notebook has run, so a failure (an error, a
full disk) leaves the previous item as it was.
"""
from __future__ import annotations

import argparse
import ast
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import nbformat
import papermill as pm

from .book import book_root, publish_pages
from .profiles import BOOK_PROFILE, get_profile, seeds
from .records import OWNER_ENV, check_writable, clean_stale_tmp, tmp_prefix
from .results import (NOTEBOOK_ENV, PENDING_ENV, REPO, catalog, discard, makes, notebook_path, read_pending, results_dir,
                      swap)

NOTEBOOKS = REPO / "notebooks"


def find(paper: str | None = None, item: str | None = None) -> list[Path]:
    """Notebooks under notebooks/<paper>/, filtered by chapter and/or item: its slug (``table3``) or
    its name in CATALOG.md (``"Table 3"``)."""
    papers = sorted(p.name for p in NOTEBOOKS.iterdir() if p.is_dir())
    if paper and paper not in papers:
        planned = sorted(set(catalog().paper) - set(papers))
        if paper in planned:
            raise SystemExit(f"the {paper} chapter has no notebooks yet (not started); "
                             f"chapters with notebooks: {', '.join(papers)}")
        raise SystemExit(f"unknown paper {paper!r}; valid choices: {', '.join(papers)}"
                         + (f" (not started: {', '.join(planned)})" if planned else ""))
    nbs = sorted(NOTEBOOKS.glob(f"{paper or '*'}/*.ipynb"))
    if item:
        nbs = [nb for nb in nbs if makes(nb, item)]
    if not nbs:
        raise SystemExit(f"no notebook for paper={paper} item={item}; available: "
                         + ", ".join(f"{p.parent.name}/{p.stem}" for p in sorted(NOTEBOOKS.glob('*/*.ipynb'))))
    return nbs


def check_parameters(nb: Path, params: dict) -> None:
    """Refuse parameters the notebook does not declare (papermill would only warn), and values of
    another type than the declared default (an int where a list is expected ...)."""
    declared = pm.inspect_notebook(str(nb))
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise SystemExit(f"{_name(nb)}: unknown parameter(s) {unknown}; "
                         f"valid: {', '.join(declared)}")
    for name, value in params.items():
        try:
            default = ast.literal_eval(declared[name]["default"])
        except (ValueError, SyntaxError):
            continue  # an expression: nothing to compare with
        if default is not None and value is not None and not _same_kind(value, default):
            raise SystemExit(f"{_name(nb)}: parameter {name}={value!r} is {type(value).__name__}; "
                             f"expected {type(default).__name__}, like its default {default!r}")
    if "seeds" in params:
        try:
            seeds(params.get("profile", BOOK_PROFILE), params["seeds"])
        except ValueError as e:
            raise SystemExit(f"{_name(nb)}: {e}") from None


def _name(nb: Path) -> str:
    return f"{nb.parent.name}/{nb.name}"


def _same_kind(value, default) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float)) and (isinstance(default, float) or isinstance(value, int))
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def execute(nb: Path, params: dict, out_dir: Path) -> Path:
    """Run ``nb`` and swap in its executed copy and the item files it saved, all or nothing."""
    check_parameters(nb, params)
    out = out_dir / nb.parent.name / nb.name
    check_writable(out.parent, "the executed notebook")
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_tmp(out.parent)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=tmp_prefix(nb.stem), suffix=".tmp") as tmp:
        tmp_out, pending = Path(tmp) / nb.name, Path(tmp) / "pending.jsonl"
        t0 = time.time()
        try:  # the kernel inherits both: save_item stages (owned by this process), swaps nothing
            with environ({PENDING_ENV: str(pending), OWNER_ENV: str(os.getpid())}):
                kernel(nb, tmp_out, params)
            compact(tmp_out)
        except BaseException:
            discard(read_pending(pending))
            raise
        swap(read_pending(pending) + [(tmp_out, out)])
    print(f"{_name(nb)}: {time.time() - t0:.0f} s -> {out}", flush=True)
    return out


def kernel(nb: Path, out: Path, params: dict) -> None:
    """Execute ``nb`` into ``out`` with papermill, in the notebook's folder; the kernel is told which
    notebook it runs (``$VITMLP_NOTEBOOK``: the source its items record)."""
    with environ({NOTEBOOK_ENV: notebook_path(nb)}):
        pm.execute_notebook(str(nb), str(out), parameters=params, cwd=str(Path(nb).parent),
                            progress_bar=False, kernel_name="python3")


@contextmanager
def environ(values: dict):
    """Set environment variables (a kernel started inside inherits them), restored on the way out."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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
    ap.add_argument("--profile", default=BOOK_PROFILE, help="the one profile of this run (default: the book's)")
    ap.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="extra notebook parameter (YAML value); not the profile")
    args = ap.parse_args(argv)
    import yaml
    try:
        get_profile(args.profile)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    extra = {k: yaml.safe_load(v) for k, v in args.param}
    if "profile" in extra:
        raise SystemExit(f"give the profile with --profile, not -p profile (got --profile {args.profile} "
                         f"and -p profile {extra['profile']}): it decides what runs and where results go")
    params = {"profile": args.profile, **extra}
    weights = params.get("weights", "book")
    book_run = args.profile == BOOK_PROFILE and weights == "book"
    out_dir = Path(os.environ.get("VITMLP_OUT") or (book_root() if book_run else tempfile.mkdtemp()))
    if not book_run:  # records of other profiles go beside their results, not into the book's
        os.environ.setdefault("VITMLP_RESULTS", str(results_dir(args.profile, weights)))
    nbs = find(args.paper, args.item)
    for nb in nbs:  # every notebook's parameters before the first kernel starts
        check_parameters(nb, params)
    check_writable(results_dir(args.profile, weights), "results")
    for nb in nbs:
        page = execute(nb, params, out_dir)
        if out_dir.resolve() == book_root().resolve():  # a page in book/ in the form `make book` gives it (no stderr)
            publish_pages([page])


if __name__ == "__main__":
    main(sys.argv[1:])
