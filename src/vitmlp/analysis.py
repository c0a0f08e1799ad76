"""Numbers computed from trained weights, for the `analysis` items.

    sparsity(w)                  # share of |w| below 5% of max |w| (ResMLP Figures 3, B.2)
    locality(A, grid)            # per cross-patch matrix: where each row's weight mass sits (Figures 2, B.1)
    central_rows(A, grid, k)     # rows of A for the k x k central patches, as (k, k, grid, grid) images
    shift_similarity(A, grid)    # are the rows of neighbouring patches shifted copies? (Figures 2, B.1)
    low_frequency_share(images)  # share of each image's energy at low spatial frequency (Mixer Figures 5-7)
    smoothness(images)           # the same, 0 for white noise and 1 for only low frequencies
    closest_inverse(units)       # each unit's most anti-correlated partner (Mixer Figures 5, 6)
    pair_by_frequency(units)     # the display order of Mixer's Appendix D: low frequency first, in pairs
    mosaic(images, cols)         # many small images tiled into one array (one imshow instead of N axes)
    pixel_norm_scales(model)     # DPN's first LayerNorm scale as (C, p, p) images (Dual PatchNorm Figure 2)
    layer_tokens(model, x)       # stem, after the position embedding, every block: patch tokens (Scaled ReLU Figure 1)
    dense_projections(model)     # patch projection, then every dense layer of the blocks (DPN Figure 3)
    grad_norms(model, batches)   # |d loss / d W| of each of them, averaged over batches (DPN Figure 3)

Which weights an analysis notebook reads (its ``weights`` / ``checkpoints`` parameters):

    check_weights(weights, checkpoints, names)   # refuses bad values before anything is written
    book_models(config)          # a planned run's trained weights and the weights it started from
    timm_models(name, checkpoints)   # timm's pretrained weights (a local file offline) + a fresh init
    book_snapshots(config)       # a planned run's weights after every epoch, {0: init, ..., last: final}
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange

from .choices import check_choice

WEIGHTS = ["book", "timm"]


def sparsity(w: torch.Tensor, rel: float = 0.05) -> float:
    """Fraction of entries whose magnitude is below ``rel`` times the largest magnitude."""
    a = w.detach().abs().flatten().float()
    return float((a < rel * a.max()).float().mean())


def _positions(grid: int) -> torch.Tensor:
    """(N, 2) row/column of each patch in raster order."""
    return torch.stack(torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij"), -1).view(-1, 2)


def _check_grid(A: torch.Tensor, grid: int) -> None:
    N = grid * grid
    if A.shape != (N, N):
        raise ValueError(f"A must be ({N}, {N}) for a {grid}x{grid} grid, got {tuple(A.shape)}")


def locality(A: torch.Tensor, grid: int, radius: int = 1) -> dict:
    """Where the weight mass |A[i, :]| of an output patch i sits, averaged over the patches whose
    (2 radius + 1)^2 neighbourhood fits inside the grid:

    ``self``: share on the patch itself (a "spike"); ``near``: share on the other patches within
    Chebyshev distance ``radius`` (a convolution-like support); ``far``: the rest; ``near_uniform``:
    the ``near`` share that weights spread evenly would give, so near / near_uniform > 1 means local.
    """
    _check_grid(A, grid)
    N = grid * grid
    pos = _positions(grid)
    dist = (pos[:, None, :] - pos[None, :, :]).abs().amax(-1)                # (N, N) Chebyshev
    inner = ((pos >= radius) & (pos < grid - radius)).all(-1)               # neighbourhood fits
    m = A.detach().abs().float()[inner]
    m = m / m.sum(1, keepdim=True)
    d = dist[inner]
    near_n = (2 * radius + 1) ** 2 - 1
    return {"self": float(m[d == 0].mean()), "near": float((m * ((d > 0) & (d <= radius))).sum(1).mean()),
            "far": float((m * (d > radius)).sum(1).mean()), "near_uniform": near_n / N}


def central_rows(A: torch.Tensor, grid: int, k: int) -> torch.Tensor:
    """Rows of A for the k x k central output patches, each as a grid x grid image: (k, k, grid, grid)."""
    if not 0 < k <= grid:
        raise ValueError(f"k must be in 1..{grid}, got {k}")
    lo = (grid - k) // 2
    idx = [(lo + r) * grid + lo + c for r in range(k) for c in range(k)]
    return A.detach()[idx].view(k, k, grid, grid)


def shift_similarity(A: torch.Tensor, grid: int) -> float:
    """How much the row of a patch is the row of its left (upper) neighbour moved one patch right
    (down), as a convolution's rows are: Pearson correlation of the two grid x grid images on the
    window where both are defined, averaged over the patches off the border (as in :func:`locality`)
    and the two shifts. 1 for a convolution, about 0 for random weights."""
    _check_grid(A, grid)
    img = A.detach().float().view(grid, grid, grid, grid)       # (out row, out col, in row, in col)
    r = torch.arange(1, grid - 1)
    corrs = []
    for dy, dx in ((0, 1), (1, 0)):
        p = img[r[:, None], r[None, :]][..., : grid - dy, : grid - dx]               # patch (i, j)
        q = img[r[:, None] + dy, r[None, :] + dx][..., dy:, dx:]                     # patch (i+dy, j+dx)
        p, q = p.flatten(2), q.flatten(2)
        p, q = p - p.mean(-1, keepdim=True), q - q.mean(-1, keepdim=True)
        corrs.append((p * q).sum(-1) / (p.norm(dim=-1) * q.norm(dim=-1)).clamp_min(1e-12))
    return float(torch.cat([c.flatten() for c in corrs]).mean())


def check_weights(weights: str, checkpoints, names, seeds=None) -> dict:
    """The analysis notebooks' parameters: ``weights`` "book" (the book's trained runs) or "timm"
    (the paper's ImageNet weights); ``checkpoints`` None or {timm name: local file} for the timm
    names in ``names`` (offline); ``seeds``, where they choose the book's runs, None unless
    weights="book". Returns {name: Path}."""
    check_choice("weights", weights, WEIGHTS)
    if seeds is not None and weights != "book":
        raise ValueError("seeds choose the book's runs: give them with weights='book'")
    if checkpoints is None:
        return {}
    if weights != "timm":
        raise ValueError(f"checkpoints are local files of timm weights: give them with weights='timm', "
                         f"not weights={weights!r}")
    if not isinstance(checkpoints, dict):
        raise ValueError(f"checkpoints must be None or a dict {{timm name: file}}, got {type(checkpoints).__name__}")
    for name, path in checkpoints.items():
        check_choice("timm name in checkpoints", name, names)
        if not Path(path).is_file():
            raise FileNotFoundError(f"checkpoint of {name}: no file {path}")
    return {name: Path(path) for name, path in checkpoints.items()}


def book_models(config):
    """A planned run's final weights (trained now if missing) and the weights it started from. The
    trainer seeds torch with ``config.seed`` right before building the model, so doing the same
    rebuilds the initial weights exactly (runs with ``init_from`` start elsewhere: refused)."""
    from .records import config_hash
    from .train import load_weights, train, trainer
    if config.init_from:
        raise ValueError("book_models: a run with init_from does not start from a fresh model")
    train(config)                                   # cached: returns the record if it exists
    if (gap := trainer.rebuild_gap(trainer.rebuilt_weights(h := config_hash(config)))) > trainer.REBUILD_TOLERANCE:
        raise ValueError(f"run {h[:8]}: its cached weights are a rebuild {gap:.1f} points of top-1 from its record "
                         f"(tolerance {trainer.REBUILD_TOLERANCE:g}): another trajectory, not the recorded run; "
                         "bring its weights from where it was trained (runqueue merge)")
    trained = load_weights(h)
    torch.manual_seed(config.seed)
    init = trainer.build_model(config.model, {**config.model_options, "num_classes": trained.num_classes})
    return trained, init.eval()


def timm_models(name: str, checkpoints: dict | None = None, seed: int = 0):
    """timm's pretrained ``name`` (from ``checkpoints[name]`` when given, else downloaded) and the
    same architecture freshly initialised by timm (seeded), as the reference before training."""
    import timm
    file = (checkpoints or {}).get(name)
    overlay = {"pretrained_cfg_overlay": {"file": str(file)}} if file else {}
    trained = timm.create_model(name, pretrained=True, **overlay)
    torch.manual_seed(seed)
    return trained.eval(), timm.create_model(name, pretrained=False).eval()


def fit_gap(config, train_images: int | None = None) -> dict:
    """Top-1 (%) and cross-entropy of a finished run's final weights on its own training images
    and on its val set, both without augmentation or label smoothing: the generalisation gap the
    papers call overfitting (a training loss logged under crop/flip and label smoothing is not
    comparable with a val loss). ``train_images``: the first n training images (None: all)."""
    import contextlib
    from .records import config_hash
    from .train import build_data, load_weights
    from .train.batches import Batches, pixel_shuffle
    from .train.trainer import evaluate
    model = load_weights(config_hash(config))
    out = {}
    for name, ds, size in zip(("train", "val"), build_data(config), (train_images or config.train_size, config.val_size)):
        data = Batches(ds, size, shuffle=pixel_shuffle(config))    # no augmentation; the run's pixel shuffle
        out[f"{name}_top1"], out[f"{name}_loss"] = evaluate(model, data, 256, 0, 1, "cpu", contextlib.nullcontext, 0)
    return out


def fit_gaps(configs, train_images: int | None = None) -> list[dict]:
    """:func:`fit_gap` of each config. In a collect the weights missing from the cache are noted all at
    once (the queue then brings them all back) before the notebook stops; with all of them cached it
    goes on (a re-execution check trains nothing). A run whose cached weights are a rebuild too far
    from its record (``trainer.REBUILD_TOLERANCE``) gets NaNs: they are not that run's weights
    (:func:`experiment.training_time` names it)."""
    from . import runqueue
    from .records import config_hash
    from .train.trainer import REBUILD_TOLERANCE, rebuild_gap, rebuilt_weights
    runqueue.need_weights(configs, "fit_gap")
    nan = dict.fromkeys(("train_top1", "train_loss", "val_top1", "val_loss"), float("nan"))
    return [nan if rebuild_gap(rebuilt_weights(config_hash(c))) > REBUILD_TOLERANCE else fit_gap(c, train_images)
            for c in configs]


def book_snapshots(config) -> dict:
    """A planned run's weights after every epoch, {epoch: model in eval mode}: 0 is the initial
    weights, the last epoch the final ones; trained now if missing. The trainer checkpoints every
    epoch but the last (``last.pt``) and then calls back; the callback keeps those weights as
    ``epoch<k>.pt`` beside the run's final ``model.pt``. A run recorded without them is trained again
    in a temporary folder (same config, same weights), so its record is not rewritten; a record of a
    narrower CPU, in a process under its ISA caps, as :func:`vitmlp.train.load_weights` rebuilds one."""
    from . import runqueue
    from .records import config_hash, load_record, run_cache
    from .train import trainer
    if config.init_from:
        raise ValueError("book_snapshots: a run with init_from does not start from a fresh model")
    h = config_hash(config)
    keep, rec = run_cache(h), load_record(h)
    kept = lambda r: all((keep / f"epoch{k}.pt").exists() for k in range(1, r["metrics"]["epochs"]))  # noqa: E731
    if runqueue.collecting() and (rec is None or rec["status"] == "ok" and not kept(rec)):  # a collect trains nothing
        runqueue.note([config])
        raise runqueue.Collected(f"run {h}: weights needed; the notebook stops here in collect mode")
    if rec is None or rec["status"] == "ok" and not kept(rec):
        caps = trainer.record_isa_caps(rec) if rec else {}
        if caps:  # torch reads ISA caps when it starts: a process started with them
            trainer.run_capped(caps, _SNAPSHOTS, json.dumps(config.to_dict()))
        else:
            _train_snapshots(config, rec)
    final, init = book_models(config)                 # refuses crashed runs
    out = {0: init}
    for k in range(1, load_record(h)["metrics"]["epochs"]):
        m = trainer.build_model(config.model, {**config.model_options, "num_classes": final.num_classes})
        m.load_state_dict(torch.load(keep / f"epoch{k}.pt", map_location="cpu", weights_only=True))
        out[k] = m.eval()
    out[len(out)] = final
    return out


_SNAPSHOTS = ("import json, sys; from vitmlp.analysis import _train_snapshots; from vitmlp.records import "
              "config_hash, load_record; from vitmlp.train import TrainConfig; c = TrainConfig.from_dict("
              "json.loads(sys.argv[1])); _train_snapshots(c, load_record(config_hash(c)))")


def _train_snapshots(config, rec: dict | None) -> None:
    """Train ``config`` keeping its weights after every epoch as ``epoch<k>.pt`` in its cache folder:
    as the run itself if it has no record (``rec``), else aside, in a temporary folder, with the
    record's threads (the same weights; the record and the final weights are left as they are)."""
    import tempfile
    from .records import atomic_torch_save, config_hash, run_cache
    from .train import train, trainer
    h = config_hash(config)

    def copy_epochs(cache):
        def callback(event, info):
            ck = run_cache(h, cache) / "last.pt"
            if event == "epoch" and ck.exists():
                state = torch.load(ck, map_location="cpu", weights_only=True)
                if state["state"]["epoch"] == info["epoch"]:  # the last epoch leaves the previous last.pt
                    atomic_torch_save(state["model"], run_cache(h) / f"epoch{info['epoch']}.pt")
        return callback

    if rec is None:
        train(config, callback=copy_epochs(None))
        return
    with trainer.record_threads(rec), tempfile.TemporaryDirectory() as tmp:
        train(config, records=tmp, cache=tmp, callback=copy_epochs(tmp))


def pixel_norm_scales(model) -> torch.Tensor:
    """The scale (gamma) of Dual PatchNorm's LayerNorm on raw pixels as images (C, p, p): the stem
    flattens a patch in the listing's ``(hp wp c)`` order, so feature (i p + j) C + c is channel c's
    pixel (i, j). ``model``: a ViT with the ``dpn`` stem, or the stem itself."""
    stem = getattr(model, "patch_embed", model)
    hp, wp = stem.patch_size
    return rearrange(stem.pixel_norm.weight.detach(), "(hp wp c) -> c hp wp", hp=hp, wp=wp)


class _Reached(Exception):
    """Raised by :func:`block_input`'s hook: nothing after the block's input is computed."""


def block_input(model, x, index: int = 0) -> torch.Tensor:
    """What ``model.blocks[index]`` receives for images ``x`` (tokens after the stem, the position
    embedding and the class token); the forward pass stops there."""
    seen = []

    def hook(module, args):
        seen.append(args[0])
        raise _Reached

    handle = model.blocks[index].register_forward_pre_hook(hook)
    try:
        model(x)
    except _Reached:
        pass
    finally:
        handle.remove()
    return seen[0]


def layer_tokens(model, x) -> dict[str, torch.Tensor]:
    """Scaled ReLU Figure 1's layers of a timm ViT for images ``x``: the stem's tokens (``"stem"``), the
    tokens after the position embedding (``"pos_embed"``: what the first block receives) and after every
    block (``"block 1"`` ...), patch tokens only (the class token dropped), each (B, N, D)."""
    seen = {}
    hooks = [model.patch_embed.register_forward_hook(lambda m, a, out: seen.__setitem__("stem", out))]
    hooks.append(model.blocks[0].register_forward_pre_hook(lambda m, a: seen.__setitem__("pos_embed", a[0])))
    for i, blk in enumerate(model.blocks):
        hooks.append(blk.register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(f"block {i + 1}", out)))
    try:
        model.forward_features(x)
    finally:
        for h in hooks:
            h.remove()
    skip = getattr(model, "num_prefix_tokens", 0)
    return {k: v if k == "stem" else v[:, skip:] for k, v in seen.items()}


def dense_projections(model) -> dict[str, nn.Module]:
    """Dual PatchNorm Figure 3's layers in depth order: the patch projection (index 0; a conv with
    kernel = stride = p is a dense layer on patches), then every ``nn.Linear`` of the blocks in the
    order they run (timm's ViT block: qkv, attention output, fc1, fc2). The head is not included."""
    layers = {"patch_embed.proj": model.patch_embed.proj}
    layers.update({f"blocks.{n}": m for n, m in model.blocks.named_modules() if isinstance(m, nn.Linear)})
    return layers


def grad_norms(model, batches, loss_fn=F.cross_entropy) -> dict[str, float]:
    """Frobenius norm of d loss / d weight of each :func:`dense_projections` layer (biases apart, as
    a Flax Dense keeps its kernel apart), one value per batch of ``batches`` ((images, labels)
    pairs), then the mean over batches. Computed in eval mode (no dropout / drop-path), without
    touching the parameters' ``.grad``."""
    layers = dense_projections(model)
    weights = [m.weight for m in layers.values()]
    was_training, total = model.training, torch.zeros(len(weights), dtype=torch.float64)
    model.eval()
    try:
        n = 0
        for x, y in batches:
            grads = torch.autograd.grad(loss_fn(model(x), y), weights)
            total += torch.stack([g.detach().double().norm() for g in grads])
            n += 1
    finally:
        model.train(was_training)
    if n == 0:
        raise ValueError("grad_norms needs at least one batch")
    return dict(zip(layers, (total / n).tolist()))


def _radial_frequency(h: int, w: int) -> torch.Tensor:
    """(h, w) radial frequency of each bin of a 2-D DFT, in cycles per sample (0 .. 0.71)."""
    fy, fx = torch.fft.fftfreq(h), torch.fft.fftfreq(w)
    return (fy[:, None] ** 2 + fx[None, :] ** 2).sqrt()


def _energy(images: torch.Tensor) -> torch.Tensor:
    """(N, ..., H, W) -> (N, H, W): |DFT|^2 of each image, summed over its other axes (e.g. RGB)."""
    x = images.detach().float()
    return (torch.fft.fft2(x).abs() ** 2).reshape(x.shape[0], -1, *x.shape[-2:]).sum(1)


def low_frequency_share(images: torch.Tensor, cutoff: float = 0.25) -> torch.Tensor:
    """Share of each image's energy at radial frequency <= ``cutoff`` cycles per sample (pixels for
    stem filters, patches for token-mixing units), the mean included; images (N, ..., H, W) -> (N,).
    White noise puts the share of DFT bins below the cutoff there (about 0.2-0.3 at 0.25)."""
    e = _energy(images)
    low = _radial_frequency(*images.shape[-2:]) <= cutoff
    return e[:, low].sum(1) / e.sum((1, 2)).clamp_min(1e-30)


def smoothness(images: torch.Tensor, cutoff: float = 0.25) -> torch.Tensor:
    """:func:`low_frequency_share` rescaled so that white noise (e.g. an i.i.d. initialisation) gives
    0 and energy only at frequencies <= ``cutoff`` gives 1: (share - b) / (1 - b), b = the share of
    DFT bins below the cutoff. Comparable across image sizes (4x4 and 8x8 filters alike)."""
    b = (_radial_frequency(*images.shape[-2:]) <= cutoff).float().mean()
    return (low_frequency_share(images, cutoff) - b) / (1 - b)


def spectral_centroid(images: torch.Tensor) -> torch.Tensor:
    """Energy-weighted mean radial frequency of each image (cycles per sample); (N, ..., H, W) -> (N,)."""
    e = _energy(images)
    return (e * _radial_frequency(*images.shape[-2:])).sum((1, 2)) / e.sum((1, 2)).clamp_min(1e-30)


def _correlation(units: torch.Tensor) -> torch.Tensor:
    """(N, N) Pearson correlation between the units (rows, any trailing shape)."""
    x = units.detach().float().reshape(len(units), -1)
    x = x - x.mean(1, keepdim=True)
    x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return x @ x.T


def closest_inverse(units: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each unit (row of ``units``, any trailing shape), the other unit most anti-correlated
    with it (Pearson over the weights) and that correlation: (index (N,), correlation (N,))."""
    corr = _correlation(units)
    corr.fill_diagonal_(float("inf"))
    val, idx = corr.min(1)
    return idx, val


def pair_by_frequency(units: torch.Tensor) -> list[int]:
    """Mixer's Appendix D display order: units from low to high frequency (:func:`spectral_centroid`),
    each followed by its closest inverse among the units not shown yet. units (N, H, W)."""
    order = torch.argsort(spectral_centroid(units)).tolist()
    corr = _correlation(units)
    shown, out = torch.zeros(len(units), dtype=torch.bool), []
    for u in order:
        if shown[u]:
            continue
        shown[u] = True
        out.append(u)
        c = corr[u].masked_fill(shown, float("inf"))
        if not shown.all():
            v = int(c.argmin())
            shown[v] = True
            out.append(v)
    return out


def mosaic(images: torch.Tensor, cols: int, pad: int = 1, fill: float = float("nan")) -> torch.Tensor:
    """Tile N images (N, H, W) or (N, C, H, W) into one (rows (H+pad) - pad, cols (W+pad) - pad[, C])
    array, row by row, ``pad`` pixels of ``fill`` between them (NaN: drawn blank by imshow)."""
    x = images.detach().float()
    x = x[:, None] if x.ndim == 3 else x                                 # (N, C, H, W)
    n, c, h, w = x.shape
    rows = -(-n // cols)
    out = torch.full((c, rows * (h + pad) - pad, cols * (w + pad) - pad), fill)
    for i in range(n):
        r, k = divmod(i, cols)
        out[:, r * (h + pad):r * (h + pad) + h, k * (w + pad):k * (w + pad) + w] = x[i]
    return out[0] if images.ndim == 3 else out.permute(1, 2, 0)
