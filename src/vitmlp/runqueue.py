"""Train a queue of runs on another machine (a lent GPU, Colab, a workstation) and bring the
records home as one archive.

    # on the CPU machine: what would these notebooks train? (runs nothing)
    python -m vitmlp.runqueue collect --profile cpu --paper resmlp --item table3 -o queue.json
    # on the GPU machine (needs torch, timm, einops, pandas; no papermill): train within 9 minutes
    python -m vitmlp.runqueue train queue.json -o runs.tar.gz --budget 540
    # back on the CPU machine: records into the profile's store (results/runs at cpu), weights into the checkpoint cache
    python -m vitmlp.runqueue merge runs.tar.gz

A run is the same experiment wherever it trains (its hash leaves out the device); its record says
where it ran (``device``, ``machine.gpu``). ``train`` runs several runs at once (``--parallel``),
dependencies (a teacher, an ``init_from``) first, stops taking runs at the budget, asks the runs
under way to stop (they save a checkpoint) and puts those checkpoints in the archive: a later
``train`` given that archive as ``--resume`` continues them, so long runs can span calls.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import tarfile
import time
from pathlib import Path

PART_BYTES = 15 * 2**20   # the largest file the lent GPU returns is 16 MiB: a larger archive comes in parts
LIMIT_BYTES = 4 * PART_BYTES   # one call's archive (the lent GPU returns 64 MiB in all, logs included)
PACK_S = 20               # of a call's budget, kept for writing the archive at the end


# --- the queue ---------------------------------------------------------------------------------
def write_queue(path, configs, weights=()) -> Path:
    """A queue file: the configs (TrainConfig or dict) and the hashes whose weights are needed."""
    from .records import atomic_write_json, config_hash
    from .train import TrainConfig
    cfgs = [TrainConfig.from_dict(c.to_dict() if isinstance(c, TrainConfig) else c) for c in configs]
    runs, seen = [], set()
    for c in cfgs:
        h = config_hash(c)
        if h not in seen:
            seen.add(h)
            runs.append(c.to_dict())
    needed = {h for c in cfgs for h in c.loads} | set(weights)
    return atomic_write_json(path, {"runs": runs, "weights": sorted(needed)})


def read_queue(path) -> tuple[list, set]:
    from .train import TrainConfig
    q = json.loads(Path(path).read_text())
    if not isinstance(q, dict) or not isinstance(q.get("runs"), list):
        raise SystemExit(f"{path}: not a queue file (expected {{'runs': [...], 'weights': [...]}})")
    return [TrainConfig.from_dict(c) for c in q["runs"]], set(q.get("weights", []))


# --- collect: what notebooks would train -------------------------------------------------------
COLLECT_ENV = "VITMLP_COLLECT"


class Collected(Exception):
    """Raised in collect mode where a notebook needs trained weights to go on."""


def collecting() -> Path | None:
    p = os.environ.get(COLLECT_ENV)
    return Path(p) if p else None


def note(configs=(), weights=()) -> None:
    """In collect mode, add ``configs`` (and needed weight hashes) to the collect file."""
    path = collecting()
    old = json.loads(path.read_text()) if path.exists() else {"runs": [], "weights": []}
    from .train import TrainConfig
    old_cfgs = [TrainConfig.from_dict(c) for c in old["runs"]]
    write_queue(path, old_cfgs + list(configs), set(old["weights"]) | set(weights))


def need_weights(configs, what: str, cache=None) -> None:
    """In a collect, note every config of ``configs`` whose final weights the cache lacks (a queue then
    trains them, or trains them again, and brings them back), all at once, and stop the notebook."""
    if not collecting():
        return
    from .records import config_hash, run_cache
    lacking = [c for c in configs if not (run_cache(config_hash(c), cache) / "model.pt").exists()]
    if lacking:
        note(lacking, weights=[config_hash(c) for c in lacking])
        raise Collected(f"{what} needs the weights of {len(lacking)} run(s); the notebook stops here in collect mode")


def collect_env(profile: str, out: Path, results: Path) -> dict:
    """The environment of a collect's kernels: they read the real run records (of ``profile``, of
    every other profile by :func:`vitmlp.results.records_for`, the GPU twins by
    :func:`vitmlp.results.device_twins`) but write their items into
    ``results``, a folder thrown away after: a collect must not rewrite results/ from a half-run notebook."""
    from .profiles import PROFILES
    from .results import DEVICE_TWINS, STORES_ENV, device_twins, records_for
    stores = {**{p: str(records_for(p).resolve()) for p in PROFILES}, DEVICE_TWINS: str(device_twins().resolve())}
    return {COLLECT_ENV: str(out), "VITMLP_RECORDS": stores[profile], STORES_ENV: json.dumps(stores),
            "VITMLP_RESULTS": str(results.resolve())}


def collect(notebooks, params: dict, out, results=None) -> dict:
    """Execute ``notebooks`` in collect mode: ``experiment.run`` notes its configs instead of
    training, and the notebook stops (``Collected``) at the first call with an unrecorded run or
    missing weights. Returns {notebook: "complete" or why it stopped: collected, or an error}.
    The items the notebooks write go to ``results`` (default: a folder thrown away after)."""
    import papermill as pm
    import tempfile
    from .run import environ, kernel
    out = Path(out).resolve()
    out.unlink(missing_ok=True)
    stops = {}
    with tempfile.TemporaryDirectory() as scratch, \
            environ(collect_env(params["profile"], out, Path(results or Path(scratch) / "results"))):
        for nb in notebooks:
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    kernel(Path(nb), Path(tmp) / Path(nb).name, params)
                    stops[str(nb)] = "complete"
                except pm.PapermillExecutionError as e:   # Collected: the expected stop; anything else a fault
                    what = "collected" if e.ename == "Collected" else f"error: {e.ename}:"
                    stops[str(nb)] = f"stopped at cell {e.exec_count}, {what} {e.evalue}"[:300]
    if not out.exists():
        write_queue(out, [])
    return stops


# --- train: a queue within a time budget -------------------------------------------------------
def train_queue(queue, out, *, budget: float, parallel: int, resume=None, records=None, cache=None,
                compile=False, limit: int = LIMIT_BYTES) -> dict:
    """Train the queue's runs that have no record yet, ``parallel`` at a time, the whole call within
    ``budget`` seconds; write records, needed weights and unfinished checkpoints to ``out``.

    ``out`` is rewritten with the records so far as each run ends, so a call killed at its time
    limit still leaves what it finished. ``compile``: train through ``torch.compile`` (the same runs:
    not part of their hash). ``limit``: bytes the archive may weigh, in all its parts."""
    start = time.time()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    from .experiment import STOP_GRACE_S, _weights_to_rebuild, run_pool
    from .records import config_hash, load_record, machine
    from .results import records_for
    cfgs, weights = read_queue(queue)
    cfgs = [c.replace(compile=True) for c in cfgs] if compile else cfgs
    if records is None:   # the store the notebooks of the queue's profile read
        profiles = sorted({c.profile for c in cfgs})
        if len(profiles) > 1:
            raise SystemExit(f"{queue}: runs of several profiles ({', '.join(profiles)}), whose records live in "
                             "different stores: give --records, or one queue per profile")
        records = records_for(profiles[0]) if profiles else None
    if resume:
        merge(resume, records=records, cache=cache)
    hashes = [config_hash(c) for c in cfgs]
    had = {h for h in hashes if load_record(h, records) is not None}
    _prebuild_data([c for c, h in zip(cfgs, hashes) if h not in had])
    done = []

    def landed(cfg, rec):
        done.append(rec["hash"])
        pack(out, done, (), (), records=records, cache=cache, manifest={"partial": True})
        m = rec["metrics"]
        print(f"[{time.time() - start:4.0f} s] {rec['hash']} {cfg.model} {rec['status']} top-1 {m['final_top1']}"
              f" ({rec['images_per_s'] or 0:.0f} images/s)", flush=True)
    deadline = start + budget - STOP_GRACE_S - PACK_S
    # the weights an analysis asks for, of runs recorded long ago, are trained again here (after the
    # new runs, in the queue's order: it puts first what the next pages need), so the archive brings
    # them back with the new records
    order = [h for h in hashes if h in weights] + sorted(weights - set(hashes))
    kw = {"records": records, "cache": cache, "progress": False}
    recs = run_pool(cfgs, parallel, kw, deadline=deadline, on_record=landed, rebuild=order)
    unfinished = [h for h, r in zip(hashes, recs) if r is None]
    # a rebuild the deadline stopped (or never started) is unfinished too: its checkpoint comes back
    unfinished += _weights_to_rebuild([], set(unfinished), kw, order)
    manifest = {"queue": len(hashes), "already_recorded": len(had), "trained": len(done),
                "crashed": sum(1 for h, r in zip(hashes, recs) if r and h in done and r["status"] == "crash"),
                "unfinished": unfinished,
                "seconds": round(time.time() - start), "machine": machine()}
    size = pack(out, done, weights, manifest["unfinished"], records=records, cache=cache, manifest=manifest,
                limit=limit)
    print(f"{manifest['trained']} trained ({manifest['crashed']} crashed), {len(had)} already recorded, "
          f"{len(manifest['unfinished'])} unfinished, in {manifest['seconds']} s; {out}: {size / 2**20:.1f} MiB")
    return manifest


def _prebuild_data(cfgs) -> None:
    """Generate each embedded data set once, before the workers start (they would race to)."""
    from .train.batches import build_data
    seen = set()
    for c in cfgs:
        key = (c.dataset, c.img_size, json.dumps(c.dataset_options, sort_keys=True), c.augment)
        if key not in seen and c.dataset.startswith("embedded"):
            seen.add(key)
            build_data(c)


def pack(out, hashes, weights, unfinished, *, records=None, cache=None, manifest=None,
         limit: int = LIMIT_BYTES) -> int:
    """Records of ``hashes``, the cached ``model.pt`` of those in ``weights`` (with the note of where
    it was rebuilt, if it was) and ``last.pt`` of ``unfinished`` into a .tar.gz of at most ``limit``
    bytes (weights left out first, and listed, when it would not fit), in parts of PART_BYTES when it
    is larger than one (``out.part0``, ``out.part1``, ...: :func:`merge` joins them)."""
    from .records import record_path, run_cache
    from .train.trainer import REBUILT
    files = [(record_path(h, records), f"runs/{h}.json") for h in hashes]
    extra = [(run_cache(h, cache) / name, f"cache/{h}/{name}") for h in sorted(weights) for name in ("model.pt", REBUILT)
             if (run_cache(h, cache) / "model.pt").exists()]   # a rebuild's note right after its weights
    extra += [(run_cache(h, cache) / "last.pt", f"cache/{h}/last.pt") for h in unfinished]
    extra = [(p, a) for p, a in extra if p.exists()]
    total = sum(p.stat().st_size for p, _ in files) // 4   # records compress about 4x
    kept, left = [], []
    for p, a in extra:
        size = p.stat().st_size
        fits = total + size < limit
        (kept if fits else left).append((p, a))
        total += size if fits else 0
    manifest = {**(manifest or {}), "left_out": [a for _, a in left]}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(out).with_name(f".{Path(out).name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for p, a in files + kept:
            tar.add(p, arcname=a)
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    size = tmp.stat().st_size
    _write_parts(tmp, Path(out))
    if left:
        print(f"left out of the archive (over {limit / 2**20:.0f} MiB): {', '.join(a for _, a in left)}")
    return size


_PART = re.compile(r"\.part(\d+)$")   # runs.tar.gz.part1: the second part of runs.tar.gz


def _part(archive: Path, i: int) -> Path:
    return archive.with_name(f"{archive.name}.part{i}")


def _parts(archive) -> list[Path]:
    """The parts of a split archive, in order (none if it is one file)."""
    a = Path(archive)
    parts = sorted((p for p in a.parent.glob(f"{a.name}.part*") if _PART.search(p.name)),
                   key=lambda p: int(_PART.search(p.name)[1]))
    if parts != [_part(a, i) for i in range(len(parts))]:
        raise SystemExit(f"{a}: parts {', '.join(p.name for p in parts)} are not part0..part{len(parts) - 1}")
    return parts


def _write_parts(tmp: Path, out: Path) -> None:
    """``tmp`` becomes ``out`` where it fits one returned file, else ``out.part0``, ``out.part1``, ...;
    whatever an earlier pack of ``out`` left is removed, so the folder holds one archive."""
    from .records import atomic_write_bytes
    old = _parts(out)
    if tmp.stat().st_size <= PART_BYTES:
        os.replace(tmp, out)  # a reader (or a kill) never sees half an archive
        for p in old:
            p.unlink()
        return
    data = tmp.read_bytes()
    n = -(-len(data) // PART_BYTES)
    for i in range(n):
        atomic_write_bytes(_part(out, i), data[i * PART_BYTES:(i + 1) * PART_BYTES])
    for p in old[n:]:
        p.unlink()
    tmp.unlink()
    out.unlink(missing_ok=True)


def _whole(archive) -> Path:
    """The archive a part belongs to (``runs.tar.gz.part1`` -> ``runs.tar.gz``), or ``archive``."""
    return Path(_PART.sub("", str(archive)))


def _open_archive(archive) -> tarfile.TarFile:
    """An archive written by :func:`pack`, whole or in parts (``archive`` or any of its parts named)."""
    archive = _whole(archive)
    parts = _parts(archive)
    if not parts:
        return tarfile.open(archive, "r:gz")
    return tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts)), mode="r:gz")


# --- merge: the archive into this machine's records and cache ----------------------------------
def merge(archive, *, records=None, cache=None) -> dict:
    """Records into the record store (a record already there is kept, and counted), checkpoints into
    the cache. Every record is checked: its config must hash to its name."""
    from .records import atomic_write_bytes, keep_rebuild, record_path, record_problem, run_cache
    from .results import records_for
    from .train.trainer import PROGRESS, REBUILT
    counts = {"records": 0, "kept_existing": 0, "checkpoints": 0}
    with _open_archive(archive) as tar:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if not m.isfile() or ".." in parts or Path(m.name).is_absolute():
                continue
            data = tar.extractfile(m).read()
            if parts[0] == "runs" and len(parts) == 2 and m.name.endswith(".json"):
                h, rec = Path(m.name).stem, json.loads(data)
                problem = record_problem(rec, h)
                if problem:
                    raise SystemExit(f"{archive}: {m.name}: {problem}; nothing more merged")
                store = records or records_for(rec["config"]["profile"])   # where its notebooks look
                if record_path(h, store).exists():
                    counts["kept_existing"] += 1
                    continue
                atomic_write_bytes(record_path(h, store), data)
                counts["records"] += 1
                for stale in ("last.pt", PROGRESS):   # an earlier archive's checkpoint of the unfinished run:
                    (run_cache(h, cache) / stale).unlink(missing_ok=True)   # a rebuild would resume from it
            elif parts[0] == "cache" and len(parts) == 3 and parts[2] in ("model.pt", "last.pt", REBUILT):
                atomic_write_bytes(run_cache(parts[1], cache) / parts[2], data)
                if parts[2] == "model.pt":  # the run's own weights replace a rebuild (a rebuild's note follows)
                    (run_cache(parts[1], cache) / REBUILT).unlink(missing_ok=True)
                elif parts[2] == REBUILT and "profile" in (note := json.loads(data)):  # older notes: cache only
                    keep_rebuild(parts[1], note, records or records_for(note["profile"]))
                counts["checkpoints"] += 1
    return counts


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="the runs that notebooks would train, into a queue file")
    c.add_argument("--paper")
    c.add_argument("--item")
    c.add_argument("--profile", default="cpu")
    c.add_argument("-o", "--out", default="queue.json")
    c.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="a notebook parameter (YAML value), e.g. -p archs '[S/16]': a part of an item")
    t = sub.add_parser("train", help="train a queue within a time budget, into one archive")
    t.add_argument("queue")
    t.add_argument("-o", "--out", default="runs.tar.gz")
    t.add_argument("--budget", type=float, default=540,
                   help="seconds for the whole call, archive included (default 540: a 10-minute limit with room)")
    t.add_argument("--parallel", type=int, default=None, help="runs at once (default: 12 on a GPU, else 1)")
    t.add_argument("--resume", help="an earlier archive whose unfinished runs continue")
    t.add_argument("--records", help="record folder (default: the profile's, as vitmlp.run uses it)")
    t.add_argument("--compile", action="store_true",
                   help="train through torch.compile (fused kernels; the same runs, by hash)")
    t.add_argument("--limit-mib", type=float, default=LIMIT_BYTES / 2**20,
                   help=f"what the archive may weigh, in parts of {PART_BYTES // 2**20} MiB when larger "
                        f"(default {LIMIT_BYTES // 2**20}: the lent GPU returns 64 MiB; two trains in one "
                        "call share it)")
    m = sub.add_parser("merge", help="an archive into the record stores and the checkpoint cache")
    m.add_argument("archive", nargs="+")
    m.add_argument("--records", help="record folder (default: each record's profile's: results/runs "
                   "for cpu, results/profiles/gpu/runs for gpu)")
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        import yaml
        from .run import check_parameters, find
        params = {k: yaml.safe_load(v) for k, v in a.param}
        if "profile" in params:
            raise SystemExit("give the profile with --profile, not -p profile")
        params["profile"] = a.profile
        nbs = find(a.paper, a.item)
        for nb in nbs:   # unknown names and wrong types refused before any kernel starts
            check_parameters(nb, params)
        stops = collect(nbs, params, a.out)
        cfgs, weights = read_queue(a.out)
        for nb, why in stops.items():
            print(f"{nb}: {why}")
        print(f"{a.out}: {len(cfgs)} runs, {len(weights)} with weights needed")
    elif a.cmd == "train":
        if a.budget <= 0 or a.limit_mib <= 0 or (a.parallel is not None and a.parallel < 1):
            raise SystemExit("--budget and --limit-mib must be > 0 and --parallel >= 1")
        import torch
        parallel = a.parallel or (12 if torch.cuda.is_available() else 1)
        train_queue(a.queue, a.out, budget=a.budget, parallel=parallel, resume=a.resume, records=a.records,
                    compile=a.compile, limit=int(a.limit_mib * 2**20))
    else:
        for arch in dict.fromkeys(map(_whole, a.archive)):   # a part named: its archive, once
            print(f"{arch}: {merge(arch, records=a.records)}")


if __name__ == "__main__":
    main(sys.argv[1:])
