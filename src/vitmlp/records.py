"""Run records: one JSON file per trained config, plus the checkpoint cache and provenance.

* ``results/runs/<hash>.json`` (committed) holds what a book page needs: the full config, its
  hash, metrics, curves, status (``ok`` / ``crash`` with the step), wall time, machine, git commit
  and library versions. The book builds from these files without retraining.
* ``$VITMLP_CACHE/runs/<hash>/`` (default ``~/.cache/vitmlp/runs``, outside git) holds checkpoints:
  ``last.pt`` while a run is under way, ``model.pt`` (final weights) once it is done.

The hash is the first 16 hex digits of the SHA-256 of the config's canonical JSON (sorted keys,
no spaces), so the same experiment always lands in the same files.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

STATUSES = ("ok", "crash")
_PKG_ROOT = Path(__file__).resolve().parent


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace; NaN/inf refused so equal configs hash equal."""
    if dataclasses.is_dataclass(obj):
        obj = obj.to_dict() if hasattr(obj, "to_dict") else dataclasses.asdict(obj)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def config_hash(config: Any) -> str:
    """Stable id of a run config (dict or dataclass with ``hashed_dict()``)."""
    if hasattr(config, "hashed_dict"):
        config = config.hashed_dict()
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:16]


# --- where things live -------------------------------------------------------------------------
def repo_root() -> Path | None:
    """The git work tree holding this package (src layout), if there is one."""
    for p in _PKG_ROOT.parents:
        if (p / ".git").exists():
            return p
    return None


def records_dir(path: str | os.PathLike | None = None) -> Path:
    """Record store: ``path`` > ``$VITMLP_RECORDS`` > ``$VITMLP_RESULTS/runs`` > ``<repo>/results/runs``."""
    if path is None:
        path = os.environ.get("VITMLP_RECORDS")
    if path is None:
        results = os.environ.get("VITMLP_RESULTS") or (repo_root() or Path.cwd()) / "results"
        path = Path(results) / "runs"
    return Path(path)


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """Checkpoints of runs: ``path``, else ``runs/`` in the package's cache root ``$VITMLP_CACHE``
    (default ``~/.cache/vitmlp``; the generated datasets live there too)."""
    return Path(path) if path is not None else cache_root() / "runs"


def cache_root() -> Path:
    """The package's cache outside git: ``$VITMLP_CACHE`` (default ``~/.cache/vitmlp``)."""
    return Path(os.environ.get("VITMLP_CACHE") or Path.home() / ".cache" / "vitmlp").expanduser()


def run_cache(run_hash: str, cache: str | os.PathLike | None = None) -> Path:
    return cache_dir(cache) / run_hash


# --- atomic writes -----------------------------------------------------------------------------
def _atomic(path: Path, write) -> Path:
    """Write through a temp file in the same folder, then ``os.replace``: readers never see half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; caches may be shared
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    text = json.dumps(obj, indent=1, sort_keys=True, allow_nan=True) + "\n"
    return _atomic(Path(path), lambda f: f.write(text.encode()))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return _atomic(Path(path), lambda f: f.write(data))


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    import torch
    return _atomic(Path(path), lambda f: torch.save(obj, f))


# --- records -----------------------------------------------------------------------------------
def record_path(run_hash: str, records: str | os.PathLike | None = None) -> Path:
    return records_dir(records) / f"{run_hash}.json"


def load_record(run_hash: str, records: str | os.PathLike | None = None) -> dict | None:
    p = record_path(run_hash, records)
    return json.loads(p.read_text()) if p.exists() else None


def save_record(record: dict, records: str | os.PathLike | None = None) -> Path:
    if record.get("status") not in STATUSES:
        raise ValueError(f"record status must be one of {STATUSES}, got {record.get('status')!r}")
    return atomic_write_json(record_path(record["hash"], records), record)


def load_records(records: str | os.PathLike | None = None, **where) -> "pandas.DataFrame":  # noqa: F821
    """All records as one row each: ``hash, status, profile, wall_time_s, ...``, the config as
    ``config.<field>`` and the metrics as ``metrics.<name>`` columns (curves stay as lists).

    ``where`` filters on equality, with dots written as ``__``:
    ``load_records(profile="cpu", config__model="vit_S")``.
    """
    import pandas as pd
    rows = [json.loads(p.read_text()) for p in sorted(records_dir(records).glob("*.json"))]
    df = pd.json_normalize(rows, max_level=1) if rows else pd.DataFrame(columns=["hash", "status"])
    for key, value in where.items():
        col = key.replace("__", ".")
        if col not in df.columns:
            raise ValueError(f"no column {col!r} in the records; columns: {', '.join(df.columns)}")
        df = df[df[col] == value]
    return df.reset_index(drop=True)


# --- provenance --------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_capability() -> dict:
    """The CPU's vector ISA (AVX2 / AVX-512 / AMX) and whether oneDNN does bf16 natively."""
    import torch
    try:
        flags = set(open("/proc/cpuinfo").read().split())
    except OSError:
        flags = set()
    isa = ("AMX" if "amx_bf16" in flags else "AVX-512 BF16" if "avx512_bf16" in flags else
           "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "unknown")
    return {"isa": isa, "bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}


def _git() -> dict:
    root = repo_root()
    if root is None:  # a copy without .git (e.g. a lent GPU machine): the commit it was copied from
        return {"commit": os.environ.get("VITMLP_GIT_COMMIT"), "dirty": None}

    def run(*args):
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else None
    try:
        status = run("status", "--porcelain", "--untracked-files=no")
        return {"commit": run("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def provenance() -> dict:
    """Machine, git commit and library versions, for the record of a run."""
    import numpy
    import timm
    import torch
    return {
        "machine": {"cpu": _cpu_model(), "cpu_isa": cpu_capability()["isa"], "cores": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(),
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                    "platform": platform.platform()},
        "git": _git(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "timm": timm.__version__, "numpy": numpy.__version__,
                     "vitmlp": sys.modules["vitmlp"].__version__ if "vitmlp" in sys.modules else None},
    }
