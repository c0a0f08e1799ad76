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
import errno
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
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


def results_root() -> Path:
    """The results folder: ``$VITMLP_RESULTS`` (tests, or a profile's own folder set by ``vitmlp.run``),
    else ``<repo>/results``. Read at each call, so setting the variable later takes effect."""
    env = os.environ.get("VITMLP_RESULTS")
    return Path(env) if env else (repo_root() or Path.cwd()) / "results"


def records_dir(path: str | os.PathLike | None = None, default: Path | None = None) -> Path:
    """Record store: ``path`` > ``$VITMLP_RECORDS`` > ``default`` > ``runs/`` in :func:`results_root`."""
    if path is None:
        path = os.environ.get("VITMLP_RECORDS") or default or results_root() / "runs"
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
STALE_TMP_S = 600  # a temp file this old belongs to a writer that died (a checkpoint takes seconds)
# A staged file can wait for hours (the runner swaps a notebook's items in when the notebook ends), so
# its name carries the pid of the process it waits for, and it is never stale while that one lives.
OWNER_ENV = "VITMLP_OWNER_PID"


def tmp_prefix(name: str) -> str:
    """Prefix of a temp file or folder for ``name``: ``.<name>.<owner pid>.`` (the runner's pid when
    ``$VITMLP_OWNER_PID`` names it, else this process's)."""
    return f".{name}.{os.environ.get(OWNER_ENV) or os.getpid()}."


def _owner_alive(p: Path) -> bool:
    parts = p.name.split(".")
    pid = parts[-3] if len(parts) >= 4 else ""
    if not pid.isdigit():
        return False   # no owner in the name: judged by age alone
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass   # alive, another user's process
    return True


def stage(path: str | os.PathLike, write) -> Path:
    """Write through a temp file in ``path``'s folder (same file system) and return it, synced:
    ``os.replace(tmp, path)`` then swaps it in whole. On any failure the temp file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=tmp_prefix(path.name), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; caches may be shared
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return Path(tmp)


def _atomic(path: Path, write) -> Path:
    """Readers never see half a file: stage, then ``os.replace``."""
    tmp = stage(path, write)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Path(path)


def clean_stale_tmp(folder: str | os.PathLike) -> list[Path]:
    """Remove temp files (and the runner's temp folders) left in ``folder`` by a writer that was killed:
    older than STALE_TMP_S, and their owner (the pid in the name) no longer running."""
    now, gone = time.time(), []
    for p in Path(folder).glob(".*.tmp"):
        try:
            if now - p.stat().st_mtime <= STALE_TMP_S or _owner_alive(p):
                continue
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
            gone.append(p)
        except FileNotFoundError:
            pass
    return gone


def set_aside(path: str | os.PathLike, problem: str, error: BaseException | None = None) -> Path:
    """Move an unreadable cache or record file out of the way (``<name>.corrupt``), saying so with
    its path, so the next step rebuilds it instead of failing on it again."""
    path = Path(path)
    if error is not None:
        problem += f" ({type(error).__name__}: {(str(error).splitlines() or [''])[0][:120]})"
    bad = path.with_name(path.name + ".corrupt")
    os.replace(path, bad)
    warnings.warn(f"{path}: {problem}; moved aside to {bad.name}, it will be rebuilt", stacklevel=2)
    return bad


def check_writable(folder: str | os.PathLike, what: str) -> Path:
    """Fail now, naming ``folder``, if nothing can be written there (not after hours of training).
    Creates nothing: a folder that does not exist yet is judged by its nearest existing parent."""
    folder = Path(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{probe} is not a folder")
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".write-check.", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise PermissionError(f"cannot write {what} to {folder}: {e.strerror or e}") from None
    return folder


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
    """The record of ``run_hash``, or None. A record that is unreadable, incomplete, or whose config
    does not hash to its name is set aside (:func:`set_aside`) and counts as absent."""
    p = record_path(run_hash, records)
    if not p.exists():
        return None
    try:
        rec = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        set_aside(p, "unreadable record", e)
        return None
    problem = record_problem(rec, run_hash)
    if problem:
        set_aside(p, problem)
        return None
    return rec


REBUILDS = "rebuilds"   # the store's notes of runs trained again to rebuild their weights


def keep_rebuild(run_hash: str, note: dict, records: str | os.PathLike | None = None) -> Path:
    """Add a rebuild's note (where the record and the rebuild trained, and their top-1) to the store,
    beside the records: a cache is one machine's, while the pairs it leaves are the book's evidence
    of what another device or precision does to a run (one note per rebuild, by its time)."""
    path = records_dir(records) / REBUILDS / f"{run_hash}.json"
    notes = json.loads(path.read_text()) if path.exists() else []
    if note not in notes:
        atomic_write_json(path, sorted([*notes, note], key=lambda n: n["created"]))
    return path


def rebuild_notes(records: str | os.PathLike | None = None) -> list[dict]:
    """Every rebuild note of the store, each with its run's ``hash``."""
    folder = records_dir(records) / REBUILDS
    return [{"hash": f.stem, **n} for f in sorted(folder.glob("*.json")) for n in json.loads(f.read_text())]


def loaded_as_recorded(note: dict, rec: dict) -> bool | None:
    """Whether a rebuild (its note) loaded the teacher / start-point weights its record loaded: True
    for a run that loads none, None where an older note does not say. A rebuild that loaded others
    is a different experiment, not a test of what the device does to a run."""
    from .train.config import TrainConfig  # imported late: records is imported by the trainer
    loads = TrainConfig.from_dict(rec["config"]).loads
    if not loads:
        return True
    if "loaded" not in note:
        return None
    recorded = rec.get("rebuilt_weights") or {}
    return all(note["loaded"].get(h) == recorded.get(h) for h in loads)


RECORD_KEYS = ("hash", "config", "status", "metrics", "curves", "num_classes")


def record_problem(rec, run_hash: str) -> str | None:
    """Why ``rec`` cannot be the record of ``run_hash`` (None if it can)."""
    from .train.config import TrainConfig  # imported late: records is imported by the trainer
    if not isinstance(rec, dict):
        return "a record must be a JSON object"
    missing = [k for k in RECORD_KEYS if k not in rec]
    if missing:
        return f"record without {', '.join(missing)}"
    if rec["status"] not in STATUSES:
        return f"record status {rec['status']!r} is not one of {STATUSES}"
    try:
        h = config_hash(TrainConfig.from_dict(rec["config"]))
    except (TypeError, ValueError) as e:
        return f"record with an invalid config ({e})"
    if rec["hash"] != run_hash or h != run_hash:
        return f"record whose config hashes to {h}, not to its name {run_hash}"
    return None


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
def cpu_identity(cpuinfo: str | None = None) -> dict:
    """The first CPU of /proc/cpuinfo (or of ``cpuinfo``): its model name and, as 'family 23 model 1',
    its generation, which the name alone may not tell ('AMD EPYC' covers CPUs 2x apart in speed)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    first = dict(line.split(":", 1) for line in cpuinfo.split("\n\n")[0].splitlines() if ":" in line)
    first = {k.strip(): v.strip() for k, v in first.items()}
    out = {"cpu": first.get("model name") or platform.processor() or platform.machine()}
    if "cpu family" in first and "model" in first:
        out["cpu_id"] = f"family {first['cpu family']} model {first['model']}"
    return out


def cpu_capability() -> dict:
    """The CPU's vector ISA (AVX2 / AVX-512 / AMX) and whether oneDNN does bf16 natively."""
    import torch
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        flags = set()
    isa = ("AMX" if "amx_bf16" in flags else "AVX-512 BF16" if "avx512_bf16" in flags else
           "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "unknown")
    native = isa
    if isa in ISA_ORDER[1:] and torch.backends.cpu.get_cpu_capability() == "AVX2":
        isa = "AVX2"  # capped (ISA_CAPS): the kernels run are AVX2's
    return {"isa": isa, "native": native, "bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())}


# The bits of a CPU run depend on the kernels torch picks for the vector ISA. A wider CPU runs a
# narrower ISA's kernels when these are set before torch starts: an AVX2 record's epochs rebuild bit
# for bit on an AVX-512 BF16 CPU (measured; without the caps the first epoch's loss differs in the 7th decimal).
ISA_ORDER = ["AVX2", "AVX-512", "AVX-512 BF16", "AMX"]
ISA_CAPS = {"AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}


def isa_caps(isa: str | None) -> dict | None:
    """The environment in which this CPU computes as a CPU of kind ``isa`` did: {} if it is that
    kind, None if it cannot (a narrower CPU, a kind with no caps, an unrecorded one)."""
    here = cpu_capability()["isa"]
    if isa == here:
        return {}
    wider = isa in ISA_ORDER and here in ISA_ORDER and ISA_ORDER.index(here) > ISA_ORDER.index(isa)
    return ISA_CAPS.get(isa) if wider else None


def hardware_kind(machine: dict) -> str:
    """What a speed ratio depends on: the GPU's name, else the CPU's vector ISA ('AVX2', ...)."""
    return (machine or {}).get("gpu") or (machine or {}).get("cpu_isa") or "unrecorded hardware"


def this_hardware() -> str:
    """:func:`hardware_kind` of this machine."""
    return hardware_kind(machine())


def kind_slug(kind: str) -> str:
    """A file-name form of a hardware kind: 'AVX-512 BF16' -> 'avx512-bf16'."""
    return re.sub(r"[^a-z0-9]+", "-", kind.lower().replace("-", "")).strip("-")


def _git() -> dict:
    root = repo_root()
    if root is None:  # a copy without .git (e.g. a lent GPU machine): the commit it was copied from
        return {"commit": os.environ.get("VITMLP_GIT_COMMIT"), "dirty": None}

    def run(*args):
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else None
    try:
        # dirty: the code or inputs differ from the commit; the outputs (results/, book/) do not count,
        # so re-running items one after another, before their results are committed, stays clean
        status = run("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results", ":!book")
        return {"commit": run("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def machine() -> dict:
    """This machine: CPU, its vector ISA, cores, torch threads, GPU, platform."""
    import torch
    cap = cpu_capability()
    return {**cpu_identity(), "cpu_isa": cap["isa"], "cores": os.cpu_count(),
            **({"cpu_isa_native": cap["native"]} if cap["native"] != cap["isa"] else {}),  # run under ISA caps
            "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "platform": platform.platform()}


def provenance() -> dict:
    """Machine, git commit and library versions, for the record of a run."""
    import numpy
    import timm
    import torch
    return {
        "machine": machine(),
        "git": _git(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "timm": timm.__version__, "numpy": numpy.__version__,
                     "vitmlp": sys.modules["vitmlp"].__version__ if "vitmlp" in sys.modules else None},
    }
