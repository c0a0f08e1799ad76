"""Where regenerated items live, and the ledger of every CATALOG item.

Each regenerated item of a paper is a JSON sidecar ``results/<paper>/<slug>.<class>.json``
(provenance, verdict, files) beside its CSV/PNG files. ``results/ledger.csv`` is rebuilt from
those sidecars and the catalog, so the book's status tables never claim what is not on disk.
"""
from __future__ import annotations

import io
import json
import os
import re
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import pandas as pd

from ..profiles import BOOK_PROFILE, PROFILES, SHORT_SCHEDULE, signature
from ..records import (atomic_write_bytes, clean_stale_tmp, hardware_kind, kind_slug, provenance, records_dir,
                       repo_root, results_root, stage)

CLASSES = ("exact", "measured", "reduced", "analysis", "external", "schematic")
ITEM_FIELDS = ["paper", "item", "class", "profile", "profile_signature", "source", "verdict", "claim", "summary",
               "files", "time", "git", "machine"]
VERDICTS = ("reproduced", "not reproduced", "inconclusive at this scale", "not reproducible here")
REPO = repo_root() or Path.cwd()
HARDWARE = "hardware"   # results/<paper>/hardware/: a measured item's last table on each kind of hardware
# columns that count things: a table joined from rows with and without them stays integer ("3", not "3.0")
COUNTS = ("seeds", "crashes", "images", "updates", "resolution")


PENDING_ENV = "VITMLP_PENDING"  # set by the runner: staged files wait to be swapped in with the executed notebook
NOTEBOOK_ENV = "VITMLP_NOTEBOOK"  # set by the runner: the notebook the kernel runs, an item's default source
INTERACTIVE = "interactive session"  # the source of an item saved outside any notebook the runner or Jupyter names


def results_dir(profile: str | None = None, weights: str = "book") -> Path:
    """``$VITMLP_RESULTS`` if set (tests point it at a temporary folder), else where a run at
    ``profile`` files its items: the book's ``results/`` only for the book's profile on the book's
    own weights, ``results/profiles/<profile>[-<weights>-weights]/`` for anything else."""
    if os.environ.get("VITMLP_RESULTS") or (profile in (None, BOOK_PROFILE) and weights == "book"):
        return results_root()
    return profile_root(profile if weights == "book" else f"{profile}-{weights}-weights")


STORES_ENV = "VITMLP_STORES"   # set by a collect: each record store, named before it moved the results
DEVICE_TWINS = "device twins"


def _stores() -> dict:
    return json.loads(os.environ.get(STORES_ENV) or "{}")


def records_for(profile: str) -> Path:
    """The record store of runs at ``profile`` as ``vitmlp.run`` sets it: ``$VITMLP_RECORDS``, else
    ``runs/`` beside the profile's results (``results/runs`` for the book's profile,
    ``results/profiles/gpu/runs`` for gpu). The queue runner collects, trains and merges by it.
    Inside a collect (``$VITMLP_STORES``), the store it named for ``profile``: the collect writes
    items to a scratch folder, and a notebook that reads another profile's records (the appendix's
    gpu calibration) still finds them."""
    stores = _stores()
    return Path(stores[profile]) if profile in stores else records_dir(default=results_dir(profile) / "runs")


def device_twins() -> Path:
    """Records of `cpu` configs trained again on a GPU (``results/appendix/gpu_twins``): the appendix
    compares them with the CPU-trained records of the same configs. Inside a collect, where it found them."""
    return Path(_stores().get(DEVICE_TWINS) or results_dir() / "appendix" / "gpu_twins")


def profile_root(name: str) -> Path:
    """Where the items of another profile than the book's sit inside the results folder (the book
    reads them from there, beside its own, whoever set the folder)."""
    return results_root() / "profiles" / name


def catalog() -> pd.DataFrame:
    """CATALOG.md as data: one row per (paper, item, class)."""
    with resources.files("vitmlp.reference").joinpath("catalog.csv").open() as f:
        return pd.read_csv(f, dtype=str)


def slug(item: str) -> str:
    """'Table 3' -> 'table3', 'Figure B.1' -> 'figureB1', 'Appendix A.1' -> 'appendixA1'."""
    head, _, rest = item.partition(" ")
    return head.lower() + re.sub(r"[^0-9A-Za-z]", "", rest)


def makes(notebook: str | os.PathLike, item: str) -> bool:
    """Whether a notebook makes ``item`` (its slug, ``table3``, or its name, ``"Table 3"``): a notebook's
    stem starts with the items it makes, ``table2+figure4_external``."""
    item = slug(item) if " " in item else item
    stem = Path(notebook).stem
    return item in stem.split("_")[0].split("+") or stem == item


BACKLOG = "backlog.json"   # scripts/next_queues.py: the runs each notebook would train, found by a collect


def backlog() -> dict:
    """``results/backlog.json``: per notebook (``paper/stem``), the runs its collect found (hash -> estimated
    hours on 2 AVX2 cores) and whether the collect reached its end; {} where it was never written."""
    p = results_dir() / BACKLOG
    return json.loads(p.read_text()) if p.exists() else {}


def notebook_path(nb: str | os.PathLike) -> str:
    """A notebook as items name their source: repository-relative (``notebooks/<paper>/<file>``, as
    the book matches them), or absolute for a notebook outside the repository."""
    path = Path(nb).resolve()
    return path.relative_to(REPO.resolve()).as_posix() if path.is_relative_to(REPO.resolve()) else str(path)


def current_source() -> str:
    """The notebook this kernel runs: the runner's (``$VITMLP_NOTEBOOK``), else Jupyter's
    (``$JPY_SESSION_NAME``, an absolute path or one relative to the server's root), else
    ``"interactive session"``."""
    if os.environ.get(NOTEBOOK_ENV):
        return os.environ[NOTEBOOK_ENV]
    session = os.environ.get("JPY_SESSION_NAME")
    if not session:
        return INTERACTIVE
    path = Path(session)
    if not path.is_absolute():  # the server's root is not known here: the repository or the notebook's folder
        path = next((p for p in (REPO / path, Path.cwd() / path.name) if p.is_file()), path)
    return notebook_path(path)


def save_item(paper: str, item: str, cls: str, *, profile: str, source: str | None = None,
              table: pd.DataFrame | None = None, figure=None, verdict: str | None = None,
              claim: str = "", summary: str = "") -> Path:
    """Write an item's table/figure and its sidecar; returns the sidecar path. ``source``: what made
    it (default: the notebook this kernel runs, :func:`current_source`)."""
    cat = catalog()
    known = cat[(cat.paper == paper)]
    if known.empty:
        raise ValueError(f"unknown paper {paper!r}; valid choices: {', '.join(cat.paper.unique())}")
    rows = known[(known["item"] == item) & (known["class"] == cls)]
    if rows.empty:
        valid = "; ".join(f"{i} ({c})" for i, c in zip(known["item"], known["class"]))
        raise ValueError(f"{item!r} with class {cls!r} is not in the catalog of {paper}; valid: {valid}")
    if verdict is not None and verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}; valid choices: {', '.join(VERDICTS)}")
    if cls in ("reduced", "analysis") and verdict is None:
        raise ValueError(f"a {cls} item needs a verdict (one of: {', '.join(VERDICTS)})")
    return _save(results_dir(profile) / paper, f"{slug(item)}.{cls}", table, figure,
                 {"paper": paper, "item": item, "class": cls, "profile": profile,
                  "source": source or current_source(), "verdict": verdict or "", "claim": claim, "summary": summary})


def save_appendix(name: str, *, profile: str, source: str | None = None, table: pd.DataFrame | None = None,
                  figure=None, summary: str = "", **extra) -> Path:
    """Results that are not a paper's item (the data set's calibration): results/appendix/."""
    return _save(results_dir(profile) / "appendix", name, table, figure,
                 {"name": name, "profile": profile, "source": source or current_source(), "summary": summary,
                  **extra})


def _counts_whole(table: pd.DataFrame) -> pd.DataFrame:
    whole = [c for c in table.columns if str(c).split(" ")[0] in COUNTS and table[c].dtype.kind == "f"   # "seeds read ..."
             and (table[c].dropna() % 1 == 0).all()]
    return table.astype({c: "Int64" for c in whole})


def _save(folder: Path, stem: str, table, figure, record: dict) -> Path:
    """Table (CSV), figure (PNG) and a JSON sidecar with provenance, written as one item."""
    files = {}
    if table is not None:
        files[folder / f"{stem}.csv"] = _counts_whole(table).to_csv(index=False).encode()
    if figure is not None:
        from ..plots import legible, smallest_text_pt
        buf = io.BytesIO()
        legible(figure).savefig(buf, format="png", dpi=120, bbox_inches="tight")
        files[folder / f"{stem}.png"] = buf.getvalue()
        record["text_pt"] = round(smallest_text_pt(figure), 1)   # as the page shows it
    from ..profiles import signature
    record = {**record, "profile_signature": signature(record["profile"]), "files": [p.name for p in files],
              "time": datetime.now(timezone.utc).isoformat(timespec="seconds"), **provenance()}
    path = folder / f"{stem}.json"
    files[path] = json.dumps(record, indent=1).encode()
    if record.get("class") == "measured":
        files.update(_per_hardware(folder, stem, files.get(folder / f"{stem}.csv"), record))
    clean_stale_tmp(folder)
    write_item(files)
    return path


def _per_hardware(folder: Path, stem: str, csv: bytes | None, record: dict) -> dict[Path, bytes]:
    """A measured item's table and sidecar kept under its hardware's name as well: a speed ratio
    holds on its kind of hardware (AVX2 and AVX-512 rank Mixer and ViT differently), so the page
    shows the last measurement of every kind, not only the newest."""
    name = f"{stem}.{kind_slug(hardware_kind(record['machine']))}"
    files = {} if csv is None else {folder / HARDWARE / f"{name}.csv": csv}
    side = {**record, "files": [p.name for p in files]}
    return {**files, folder / HARDWARE / f"{name}.json": json.dumps(side, indent=1).encode()}


def measurements(paper: str, item: str, profile: str | None = None, tables: bool = True) -> pd.DataFrame:
    """The last measurement of a measured item on each kind of hardware, newest first, with its
    ``hardware`` and ``table`` (a DataFrame, or None; not read when ``tables`` is False)."""
    root = results_dir() if profile in (None, BOOK_PROFILE) else profile_root(profile)
    folder = root / paper / HARDWARE
    recs = [json.loads(p.read_text()) for p in sorted(folder.glob(f"{slug(item)}.measured.*.json"))]
    df = pd.DataFrame(recs, columns=ITEM_FIELDS)
    df["hardware"] = [hardware_kind(m) for m in df.machine]
    df["table"] = [next((pd.read_csv(folder / f) for f in fs if f.endswith(".csv")), None) if tables else None
                   for fs in df.files]
    return df.sort_values("time", ascending=False, ignore_index=True)


def write_item(files: dict[Path, bytes]) -> None:
    """Stage every file beside its target (same file system), then swap them all in: a failure
    while staging (a full disk) leaves the previous item whole. Under the runner
    (``$VITMLP_PENDING``) the swap waits until the notebook has run and its copy is staged too."""
    staged = []
    try:
        for path, data in files.items():
            staged.append((stage(path, lambda f, d=data: f.write(d)), path))
    except BaseException:
        discard(staged)
        raise
    pending = os.environ.get(PENDING_ENV)
    if pending:
        with open(pending, "a") as f:
            f.writelines(json.dumps([str(t), str(p)]) + "\n" for t, p in staged)
    else:
        swap(staged)


def swap(staged) -> None:
    """Put staged files (temp, target) in place; renames on one file system need no space."""
    for tmp, path in staged:
        os.replace(tmp, path)


def discard(staged) -> None:
    for tmp, _ in staged:
        Path(tmp).unlink(missing_ok=True)


def read_pending(path) -> list[tuple[Path, Path]]:
    text = Path(path).read_text() if Path(path).exists() else ""
    return [tuple(map(Path, json.loads(line))) for line in text.splitlines() if line.strip()]


def load_items(paper: str | None = None, profile: str | None = None) -> pd.DataFrame:
    """Every sidecar under results/ (optionally of one paper) as a DataFrame; ``profile``: the items
    of another profile than the book's, from ``results/profiles/<profile>/``."""
    root = results_dir() if profile in (None, BOOK_PROFILE) else profile_root(profile)
    recs = [json.loads(p.read_text()) for p in sorted(root.glob(f"{paper or '*'}/*.json"))
            if p.name.count(".") == 2]
    return pd.DataFrame(recs, columns=ITEM_FIELDS)


def provisional(it) -> str:
    """Why an item's verdict is provisional, or "": a reduced / analysis item trained at a profile
    known to stop its runs short of their plateau, or at an earlier definition of its profile."""
    if it["class"] not in ("reduced", "analysis") or it["profile"] not in PROFILES:
        return ""
    sig = it.get("profile_signature")
    if not isinstance(sig, str):      # saved before items recorded their profile's signature
        return SHORT_SCHEDULE
    if sig != signature(it["profile"]):
        return (f"made at an earlier definition of the `{it['profile']}` profile (signature {sig}); "
                "it is re-run at the current one")
    return PROFILES[it["profile"]].provisional


def counted_verdict(it) -> str:
    """The verdict an item counts with: a provisional item's runs cannot resolve its claim (they stop
    short of the plateau, or the profile is not calibrated), so a firm verdict of its notebook counts
    as inconclusive until it is re-run; the notebook's own word stays on its page."""
    v = it["verdict"] or ""
    return "inconclusive at this scale" if v in ("reproduced", "not reproduced") and provisional(it) else v


def build_ledger(write: bool = True) -> pd.DataFrame:
    """One row per CATALOG (item, class): regenerated or missing, with verdict/profile/source."""
    cat = catalog()
    items = load_items().drop_duplicates(["paper", "item", "class"], keep="last")
    items["verdict"] = [counted_verdict(it) for _, it in items.iterrows()]
    led = cat.merge(items[["paper", "item", "class", "verdict", "profile", "source"]],
                    on=["paper", "item", "class"], how="left")
    led["status"] = led["source"].notna().map({True: "regenerated", False: "missing"})
    # object first: a column with no value at all is float NaN, which "" cannot fill
    led = led[["paper", "item", "class", "status", "verdict", "profile", "source"]].astype(object).fillna("")
    if write:
        atomic_write_bytes(results_dir() / "ledger.csv", led.to_csv(index=False).encode())
    return led
