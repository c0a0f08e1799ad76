"""Where regenerated items live, and the ledger of every CATALOG item.

Each regenerated item of a paper is a JSON sidecar ``results/<paper>/<slug>.<class>.json``
(provenance, verdict, files) beside its CSV/PNG files. ``results/ledger.csv`` is rebuilt from
those sidecars and the catalog, so the book's status tables never claim what is not on disk.
"""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import tempfile
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import pandas as pd

CLASSES = ("exact", "measured", "reduced", "analysis", "external", "schematic")
VERDICTS = ("reproduced", "not reproduced", "inconclusive at this scale", "not reproducible here")
REPO = Path(__file__).resolve().parents[3]


def results_dir() -> Path:
    """``$VITMLP_RESULTS`` (tests and smoke runs point it at a temporary folder) or the repo's."""
    return Path(os.environ.get("VITMLP_RESULTS", REPO / "results"))


def catalog() -> pd.DataFrame:
    """CATALOG.md as data: one row per (paper, item, class)."""
    with resources.files("vitmlp.reference").joinpath("catalog.csv").open() as f:
        return pd.read_csv(f, dtype=str)


def slug(item: str) -> str:
    """'Table 3' -> 'table3', 'Figure B.1' -> 'figureB1', 'Appendix A.1' -> 'appendixA1'."""
    head, _, rest = item.partition(" ")
    return head.lower() + re.sub(r"[^0-9A-Za-z]", "", rest)


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write via a temporary file and rename, so a killed run never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with tempfile.NamedTemporaryFile(mode, dir=path.parent, delete=False, suffix=".tmp") as f:
        f.write(data)
    os.replace(f.name, path)


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def provenance() -> dict:
    """Machine, git commit and library versions, recorded with every run and item."""
    import numpy
    import timm
    import torch
    return {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "machine": {"node": platform.node(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "timm": timm.__version__, "numpy": numpy.__version__},
    }


def save_item(paper: str, item: str, cls: str, *, profile: str, source: str,
              table: pd.DataFrame | None = None, figure=None, verdict: str | None = None,
              claim: str = "", summary: str = "") -> Path:
    """Write an item's table/figure and its sidecar; returns the sidecar path."""
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
    base = results_dir() / paper / f"{slug(item)}.{cls}"
    files = []
    if table is not None:
        atomic_write(base.with_suffix(".csv"), table.to_csv(index=False))
        files.append(base.with_suffix(".csv").name)
    if figure is not None:
        import io
        buf = io.BytesIO()
        figure.savefig(buf, format="png", dpi=120, bbox_inches="tight")
        atomic_write(base.with_suffix(".png"), buf.getvalue())
        files.append(base.with_suffix(".png").name)
    record = {"paper": paper, "item": item, "class": cls, "profile": profile, "source": source,
              "verdict": verdict or "", "claim": claim, "summary": summary, "files": files,
              **provenance()}
    path = base.with_suffix(".json")
    atomic_write(path, json.dumps(record, indent=1))
    return path


def load_items(paper: str | None = None) -> pd.DataFrame:
    """Every sidecar under results/ (optionally of one paper) as a DataFrame."""
    root = results_dir()
    recs = [json.loads(p.read_text()) for p in sorted(root.glob(f"{paper or '*'}/*.json"))
            if p.name.count(".") == 2]
    return pd.DataFrame(recs, columns=["paper", "item", "class", "profile", "source", "verdict",
                                       "claim", "summary", "files", "time", "git_commit"])


def build_ledger(write: bool = True) -> pd.DataFrame:
    """One row per CATALOG (item, class): regenerated or missing, with verdict/profile/source."""
    cat = catalog()
    items = load_items().drop_duplicates(["paper", "item", "class"], keep="last")
    led = cat.merge(items[["paper", "item", "class", "verdict", "profile", "source"]],
                    on=["paper", "item", "class"], how="left")
    led["status"] = led["source"].notna().map({True: "regenerated", False: "missing"})
    led = led[["paper", "item", "class", "status", "verdict", "profile", "source"]].fillna("")
    if write:
        atomic_write(results_dir() / "ledger.csv", led.to_csv(index=False))
    return led
