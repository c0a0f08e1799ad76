"""The embedded dataset: procedural scenes rendered analytically at any resolution.

A *scene* is a small parameter vector (background spectrum, illumination, colour gains, and a few
objects: shape, centre, radius, rotation, colour, texture). :func:`render` evaluates it on a pixel
grid of any size: the 1/f background is a Fourier series whose coefficients are multiplied by the
pixel box filter (sinc), objects are signed-distance shapes anti-aliased over one pixel, so the
same scene at 32 px and at 64 px is one picture at two resolutions (not a resize).

Labels depend on the *configuration* of the objects, never on one object's look. In every scene
the "key" objects are the objects of the one shape that occurs more than once (distractors all
have other, distinct shapes); colours, textures, sizes and positions of single objects follow the
same distribution in every class, and the mean colour carries no label information. Objects are
brighter than the (darker) ground, so "where the objects are" is visible to a linear map of
pixels, as figure and ground are in photos; which objects form the arrangement is not.

Tasks (each a label set over the same scene family):
  ``layout`` (default, 10 classes): 2..6 key objects in a row or in a column. The count can be
      summed from patches seen one at a time; row vs column cannot (the arrangement moves around
      the image), so a bag of independent patches tops out near 50%.
  ``arrangement`` (10 classes): the geometry of three key objects (lines in four orientations,
      right-angled corners in four orientations, triangles pointing up/down). At difficulty 1
      (arrangements anywhere) it is purely relational; at the default 0.5 the arrangements move
      over 40% of the room only and a linear probe on the 8x8 grid of patch means reaches 61%.
  ``count`` (transfer, 6 classes): how many key objects there are (2..7), scattered among
      distractors (0..1 at the default difficulty, 0..3 at 1), so the number of objects alone
      does not always tell.

Reproducible: scene ``i`` of a split comes from the random stream ``(seed, task, split, i // CHUNK)``,
so splits never share a stream and the first ``n`` scenes do not depend on the dataset size.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch

from ..choices import check_choice
from ..records import atomic_torch_save, cache_root, config_hash, set_aside


GENERATOR_VERSION = 6          # bump when rendering or sampling changes: invalidates the cache
CHUNK = 1000                   # scenes per random stream
SHAPES = ("circle", "square", "triangle", "cross", "ring")
SPLITS = ("train", "val", "test")
TASKS = {
    "layout": tuple(f"{o}_{n}" for n in range(2, 7) for o in ("row", "column")),
    "arrangement": ("row", "column", "diagonal", "antidiagonal",
                    "corner_tl", "corner_tr", "corner_bl", "corner_br",
                    "triangle_up", "triangle_down"),
    "count": ("two", "three", "four", "five", "six", "seven"),
}
# Class index after a horizontal flip (label-preserving flip augmentation needs it).
HFLIP = {
    "layout": tuple(range(10)),
    "arrangement": (0, 1, 3, 2, 5, 4, 7, 6, 8, 9),
    "count": tuple(range(6)),
}
# Per-channel mean/std of rendered images (measured on 5k train scenes, difficulty 0.5, 32 px:
# mean 0.313-0.324, std 0.149-0.158 for the three tasks).
MEAN = (0.32, 0.32, 0.32)
STD = (0.155, 0.155, 0.155)

_FREQ = 8                      # background Fourier series: integer frequencies -8..8 cycles/image
_MAX_DISTRACTORS = 3
_TASK_ID = {"arrangement": 0, "count": 1, "layout": 2}      # part of every random stream's key
_MAX_KEYS = {"layout": 6, "arrangement": 3, "count": 7}
_RADIUS = {"layout": (0.055, 0.070), "arrangement": (0.075, 0.100), "count": (0.062, 0.082)}
# Key-object templates for the arrangement task: (class, 3 objects, xy) in units of the spacing,
# image axes (x right, y down). Centred on their centroid below.
_T = 0.75  # diagonal step per axis
_TEMPLATES = np.array([
    [(-1, 0), (0, 0), (1, 0)],                 # row
    [(0, -1), (0, 0), (0, 1)],                 # column
    [(-_T, -_T), (0, 0), (_T, _T)],            # diagonal: top-left to bottom-right
    [(-_T, _T), (0, 0), (_T, -_T)],            # antidiagonal: bottom-left to top-right
    [(0, 0), (1, 0), (0, 1)],                  # corner_tl: right angle at the top-left object
    [(0, 0), (-1, 0), (0, 1)],                 # corner_tr
    [(0, 0), (1, 0), (0, -1)],                 # corner_bl
    [(0, 0), (-1, 0), (0, -1)],                # corner_br
    [(0, -0.866), (-0.5, 0), (0.5, 0)],        # triangle_up: equilateral, apex above the base
    [(0, 0.866), (-0.5, 0), (0.5, 0)],         # triangle_down
], dtype=np.float64)
_TEMPLATES -= _TEMPLATES.mean(axis=1, keepdims=True)
# Chroma axes orthogonal to grey (1,1,1): colours are luminance + saturation * hue direction.
_E1 = np.array([1.0, -1.0, 0.0]) / math.sqrt(2)
_E2 = np.array([1.0, 1.0, -2.0]) / math.sqrt(6)


def _knobs(difficulty: float, task: str) -> dict:
    """What ``difficulty`` in [0, 1] controls. The knobs grow with difficulty**2: the default 0.5
    is an easy-ish quarter of the way (measured: small models learn it in minutes on a CPU, far
    from 100%), 1 is the hardest setting."""
    d = float(difficulty)
    e = d * d
    return dict(
        # how far an arrangement may move from the centre, as a fraction of the room it has:
        # 0 = always centred (absolute positions give the class away, a bag of patches solves it),
        # 1 = anywhere (only the relative positions tell) -- the main knob for token mixing
        shift=0.2 + 0.8 * e,
        jitter=0.03 + 0.12 * e,          # key position noise, std in units of the spacing
        rot_deg=4.0 + 12.0 * e,          # rotation of the whole arrangement, uniform +-
        # distractors (other shapes) make "which objects belong together" a question; counting
        # needs them at any difficulty, or a bag of patches counts all objects and is done
        max_distractors=int(_MAX_DISTRACTORS * (d if task == "count" else e) + 1e-9),
        bg_contrast=0.05 + 0.10 * e,     # std of the background luminance noise
        obj_contrast=(0.30 - 0.12 * e, 0.42 - 0.10 * e),  # object vs background luminance
        key_colour_jitter=0.03 + 0.12 * e,
        min_overlap=1.0 - 0.35 * e,      # distractor-key centre distance / (sum of radii), >=
    )


def _rng(seed: int, task: str, split: str, chunk: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), _TASK_ID[task], SPLITS.index(split), chunk])


def _colour(rng, lum, n_shape, sat=(0.05, 0.30)):
    """RGB of given luminance, random hue and saturation; lum has shape n_shape."""
    hue = rng.uniform(0, 2 * math.pi, n_shape)
    s = rng.uniform(*sat, n_shape)
    return (lum[..., None] + s[..., None] * (np.cos(hue)[..., None] * _E1 + np.sin(hue)[..., None] * _E2))


def _place(rng, placed_xy, placed_r, ok_mask, r_new, min_factor, lo, hi, tries=24):
    """Rejection-sample one new object per scene, vectorised over scenes.

    placed_xy (m,k,2), placed_r (m,k), ok_mask (m,k): objects to keep clear of; r_new (m,).
    Chooses the first of ``tries`` candidates whose centre distance to every placed object is
    >= min_factor * (r_i + r_new), else the candidate with the largest margin.
    """
    m = r_new.shape[0]
    lo, hi = np.reshape(lo, (m, 1, 1)), np.reshape(hi, (m, 1, 1))   # per-scene bounds (same in x, y)
    cand = lo + (hi - lo) * rng.random((m, tries, 2))
    d = np.linalg.norm(cand[:, :, None, :] - placed_xy[:, None, :, :], axis=-1)  # (m,tries,k)
    need = min_factor * (placed_r[:, None, :] + r_new[:, None, None])
    margin = np.where(ok_mask[:, None, :], d - need, np.inf).min(-1, initial=np.inf)           # (m,tries)
    good = margin >= 0
    pick = np.where(good.any(1), good.argmax(1), margin.argmax(1))
    return cand[np.arange(m), pick]


def _background(rng, m: int, k: dict):
    """Background: luminance, colour, 1/f noise (one luminance and two chroma fields)."""
    bg_lum = rng.uniform(0.15, 0.45, m)                  # a darker ground: objects are lit figures
    bg_rgb = _colour(rng, bg_lum, m, sat=(0.0, 0.2))
    f = np.arange(-_FREQ, _FREQ + 1)
    fnorm = np.hypot(f[:, None], f[None, :])
    amp = np.where(fnorm > 0, 1.0 / np.maximum(fnorm, 1), 0.0)       # amplitude ~ 1/f
    amp /= math.sqrt(0.5 * (amp ** 2).sum())                          # unit-variance real field
    coef = (rng.standard_normal((m, 3, 2 * _FREQ + 1, 2 * _FREQ + 1))
            + 1j * rng.standard_normal((m, 3, 2 * _FREQ + 1, 2 * _FREQ + 1))) * math.sqrt(0.5) * amp
    contrast = k["bg_contrast"] * rng.uniform(0.6, 1.4, m)
    coef[:, 0] *= contrast[:, None, None]
    coef[:, 1:] *= (contrast * rng.uniform(0.2, 0.6, m))[:, None, None, None]
    return bg_lum, bg_rgb, coef


def _place_keys(rng, task: str, labels, k: dict, r_key, objs: dict) -> None:
    """Centres and radii of the key objects into ``objs`` (slots 0 .. max keys - 1)."""
    m, n_keys_max = len(labels), _MAX_KEYS[task]
    xy, r, present, is_key = objs["xy"], objs["r"], objs["present"], objs["is_key"]
    if task == "count":  # labels 0..5 are 2..7 keys, scattered without overlap
        n_keys = labels + 2
        for j in range(n_keys_max):
            rj = r_key * rng.uniform(0.92, 1.08, m)
            xy[:, j] = _place(rng, xy[:, :j], r[:, :j], present[:, :j], rj, 1.15,
                              0.03 + rj, 0.97 - rj)
            r[:, j] = rj
            present[:, j] = is_key[:, j] = j < n_keys
    else:  # a rigid arrangement (offsets from its centroid), rotated a little, jittered, moved
        if task == "arrangement":
            n_keys = np.full(m, 3)
            spacing = rng.uniform(2.4, 3.2, m) * r_key
            off = _TEMPLATES[labels]                                              # (m,3,2)
        else:  # layout: labels 2c, 2c+1 = c+2 keys in a row, in a column
            n_keys = labels // 2 + 2
            fit = (0.94 - 2 * r_key) / ((n_keys - 1) * r_key)     # longest spacing that fits
            spacing = rng.uniform(2.3, np.clip(fit, 2.3, 3.6)) * r_key
            along = np.arange(n_keys_max) - (n_keys[:, None] - 1) / 2              # (m,6)
            off = np.stack([along, np.zeros_like(along)], -1)                      # a row
            off = np.where((labels % 2 == 1)[:, None, None], off[..., ::-1], off)  # or a column
        mask = np.arange(n_keys_max) < n_keys[:, None]                            # (m,nk)
        ang = np.deg2rad(rng.uniform(-k["rot_deg"], k["rot_deg"], m))
        rot = np.stack([np.stack([np.cos(ang), -np.sin(ang)], -1),
                        np.stack([np.sin(ang), np.cos(ang)], -1)], -2)            # (m,2,2)
        off = np.einsum("mij,mkj->mki", rot, off) * spacing[:, None, None]
        off = off + rng.standard_normal(off.shape) * (k["jitter"] * spacing)[:, None, None]
        ext_lo = np.where(mask[..., None], off, np.inf).min(1) - r_key[:, None]    # (m,2)
        ext_hi = np.where(mask[..., None], off, -np.inf).max(1) + r_key[:, None]
        lo, hi = 0.03 - ext_lo, 0.97 - ext_hi              # centroid range keeping the keys inside
        centre = (lo + hi) / 2 + k["shift"] * (hi - lo) / 2 * rng.uniform(-1, 1, (m, 2))
        xy[:, :n_keys_max] = centre[:, None] + off
        r[:, :n_keys_max] = r_key[:, None] * rng.uniform(0.92, 1.08, (m, n_keys_max))
        present[:, :n_keys_max] = is_key[:, :n_keys_max] = mask


def _place_distractors(rng, task: str, k: dict, key_shape, objs: dict) -> None:
    """Distractors: each a different shape from the keys and from each other; they may occlude."""
    m, nk, r_range = len(key_shape), _MAX_KEYS[task], _RADIUS[task]
    xy, r, present, shape = objs["xy"], objs["r"], objs["present"], objs["shape"]
    n_d = rng.integers(0, k["max_distractors"] + 1, m)
    others = np.argsort(rng.random((m, len(SHAPES))) + (np.arange(len(SHAPES)) == key_shape[:, None]),
                        axis=1)                                     # key shape sorts last
    for j in range(_MAX_DISTRACTORS):
        s = nk + j
        rj = rng.uniform(*r_range, m)
        xy[:, s] = _place(rng, xy[:, :s], r[:, :s], present[:, :s], rj,
                          1.15 if task == "count" else k["min_overlap"],
                          0.03 + rj, 0.97 - rj)
        r[:, s] = rj
        shape[:, s] = others[:, j]
        present[:, s] = j < n_d


def _sample_chunk(task: str, difficulty: float, rng: np.random.Generator, m: int = CHUNK) -> dict:
    # The order of the rng draws below fixes every scene of a given GENERATOR_VERSION: keep it.
    k = _knobs(difficulty, task)
    C = len(TASKS[task])
    labels = rng.permutation(np.arange(m) % C)
    nk = _MAX_KEYS[task]
    O = nk + _MAX_DISTRACTORS
    objs = dict(xy=np.zeros((m, O, 2)), r=np.zeros((m, O)), present=np.zeros((m, O), bool),
                is_key=np.zeros((m, O), bool), shape=np.zeros((m, O), np.int64))
    bg_lum, bg_rgb, coef = _background(rng, m, k)

    # Key objects: one shape, one colour (jittered), similar sizes.
    key_shape = rng.integers(0, len(SHAPES), m)
    r_key = rng.uniform(*_RADIUS[task], m)
    _place_keys(rng, task, labels, k, r_key, objs)
    objs["shape"][:, :nk] = key_shape[:, None]
    _place_distractors(rng, task, k, key_shape, objs)
    xy, r, present, is_key, shape = (objs[a] for a in ("xy", "r", "present", "is_key", "shape"))

    # Colours: brighter than the background (at most 0.45 + 0.42); keys share a colour up to a
    # jitter. With a random polarity an object's only patch-level cue is its contrast energy,
    # which a per-token LayerNorm removes: LayerNorm models (ViT, a bag of patches with LN) then
    # sat at chance for ~1k steps while Affine models learned (measured, GENERATOR_VERSION 5).
    def lum_vs_bg(shape_):
        return bg_lum.reshape((m,) + (1,) * (len(shape_) - 1)) + rng.uniform(*k["obj_contrast"], shape_)
    key_rgb = _colour(rng, lum_vs_bg((m,)), m)
    rgb = _colour(rng, lum_vs_bg((m, O)), (m, O))
    rgb[:, :nk] = key_rgb[:, None] + rng.standard_normal((m, nk, 3)) * k["key_colour_jitter"] / 2

    # Textures: 0 flat, 1 stripes, 2 linear shading; per object.
    tex = dict(kind=rng.integers(0, 3, (m, O)), freq=rng.uniform(0.6, 1.2, (m, O)),
               dir=rng.uniform(0, 2 * math.pi, (m, O)), phase=rng.uniform(0, 2 * math.pi, (m, O)),
               amp=rng.uniform(0.15, 0.35, (m, O)))

    # Random z-order (occlusion): permute object slots per scene.
    # (absent objects sort last, so trailing slots that are empty in every scene can be skipped)
    order = np.argsort(rng.random((m, O)) + 2.0 * ~present, axis=1)
    take = lambda a: np.take_along_axis(a, order.reshape(order.shape + (1,) * (a.ndim - 2)), axis=1)
    return dict(
        label=labels, bg_rgb=bg_rgb, bg_coef=coef.astype(np.complex64),
        illum=rng.uniform(-0.3, 0.3, (m, 2)), gains=rng.uniform(0.92, 1.08, (m, 3)),
        xy=take(xy), r=take(r), theta=rng.uniform(0, 2 * math.pi, (m, O)), shape=take(shape),
        present=take(present), is_key=take(is_key), rgb=take(rgb),
        **{f"tex_{a}": take(b) for a, b in tex.items()},
    )


def sample_scenes(task: str, n: int, seed: int = 0, split: str = "train",
                  difficulty: float = 0.5, start_chunk: int = 0):
    """Scene parameters of scenes ``[start_chunk*CHUNK, ...)``, yielded one chunk (dict) at a time."""
    _check(task, split, difficulty)
    for c in range(start_chunk, start_chunk + math.ceil(n / CHUNK)):
        sc = _sample_chunk(task, difficulty, _rng(seed, task, split, c))
        keep = min(CHUNK, n - (c - start_chunk) * CHUNK)
        yield {key: v[:keep] for key, v in sc.items()}


def _check(task, split, difficulty):
    check_choice("embedded task", task, TASKS)
    check_choice("split", split, SPLITS)
    if not 0.0 <= float(difficulty) <= 1.0:
        raise ValueError(f"difficulty must be in [0, 1], got {difficulty!r}")


def _sdf(shape: torch.Tensor, qx: torch.Tensor, qy: torch.Tensor) -> torch.Tensor:
    """Signed distance (unit-radius object coordinates) of each scene's shape; qx, qy (b,H,W)."""
    ax, ay = qx.abs(), qy.abs()
    length = torch.sqrt(qx * qx + qy * qy)
    circle = length - 1.0
    square = torch.maximum(ax, ay) - 0.85
    # equilateral triangle, inradius 0.68: max over three edge half-planes
    tri = torch.maximum(torch.maximum(qy, -0.866 * qx - 0.5 * qy), 0.866 * qx - 0.5 * qy) - 0.68
    cross = torch.minimum(torch.maximum(ax - 1.0, ay - 0.36), torch.maximum(ax - 0.36, ay - 1.0))
    ring = (length - 0.72).abs() - 0.30
    s = shape.view(-1, 1, 1)
    out = torch.where(s == 0, circle, square)
    out = torch.where(s == 2, tri, out)
    out = torch.where(s == 3, cross, out)
    return torch.where(s == 4, ring, out)


def _render_batch(sc: dict, size: int) -> torch.Tensor:
    """Render scenes (dict of numpy arrays, batch b) to float RGB in [0, 1], (b,3,size,size)."""
    T = lambda a, dt=torch.float32: torch.as_tensor(np.ascontiguousarray(a), dtype=dt)
    b = len(sc["label"])
    u = (torch.arange(size, dtype=torch.float32) + 0.5) / size          # pixel centres (size,)

    # Background: Re(sum_k c_k exp(2 pi i k.x)), box-filtered over a pixel (sinc), 3 fields.
    f = torch.arange(-_FREQ, _FREQ + 1, dtype=torch.float32)
    box = torch.sinc(f / size)                                         # (K,)
    E = torch.polar(torch.ones(size, len(f)), 2 * math.pi * u[:, None] * f[None, :])  # (size,K)
    coef = T(sc["bg_coef"], torch.complex64) * (box[:, None] * box[None, :])          # (b,3,K,K): [ky,kx]
    field = (E @ coef @ E.T).real                                      # (b,3,size,size): [y,x]
    mix = T(np.stack([np.ones(3), _E1, _E2], 1))                       # (3 rgb, 3 fields)
    img = torch.einsum("cf,bfhw->bchw", mix, field) + T(sc["bg_rgb"])[:, :, None, None]

    # Objects, back to front: anti-aliased signed-distance coverage, textured colour.
    for o in range(int(sc["present"].sum(1).max(initial=0))):          # slots used by any scene
        cx = T(sc["xy"][:, o, 0]).view(b, 1, 1)
        cy = T(sc["xy"][:, o, 1]).view(b, 1, 1)
        r = T(sc["r"][:, o]).view(b, 1, 1)
        th = T(sc["theta"][:, o]).view(b, 1, 1)
        dx, dy = u.view(1, 1, size) - cx, u.view(1, size, 1) - cy          # (b,1,W), (b,H,1)
        qx = (torch.cos(th) * dx + torch.sin(th) * dy) / r                # (b,H,W)
        qy = (-torch.sin(th) * dx + torch.cos(th) * dy) / r
        d = _sdf(T(sc["shape"][:, o], torch.int64), qx, qy) * r * size  # distance in pixels
        alpha = (0.5 - d).clamp_(0, 1) * T(sc["present"][:, o]).view(b, 1, 1)
        # texture along direction psi: stripes (box-filtered) or a linear shading ramp
        psi = T(sc["tex_dir"][:, o]).view(b, 1, 1)
        proj = torch.cos(psi) * dx + torch.sin(psi) * dy                  # (b,H,W)
        kf = T(sc["tex_freq"][:, o]).view(b, 1, 1) / r                    # cycles per image unit
        stripes = (torch.cos(2 * math.pi * kf * proj + T(sc["tex_phase"][:, o]).view(b, 1, 1))
                   * torch.sinc(kf * torch.cos(psi) / size) * torch.sinc(kf * torch.sin(psi) / size))
        kind = T(sc["tex_kind"][:, o], torch.int64).view(b, 1, 1)
        shade = 1 + T(sc["tex_amp"][:, o]).view(b, 1, 1) * torch.where(
            kind == 1, stripes, torch.where(kind == 2, (proj / r).clamp(-1, 1), torch.zeros(())))
        col = T(sc["rgb"][:, o]).view(b, 3, 1, 1) * shade[:, None]
        img = torch.lerp(img, col, alpha[:, None])

    # Smooth illumination gradient and per-channel gains (white balance), then clip.
    il = T(sc["illum"])
    light = (1 + il[:, 0].view(b, 1, 1) * (u.view(1, 1, size) - 0.5)
             + il[:, 1].view(b, 1, 1) * (u.view(1, size, 1) - 0.5))                # (b,H,W)
    img = img * light[:, None] * T(sc["gains"])[:, :, None, None]
    return img.clamp_(0, 1)


def to_uint8(img: torch.Tensor) -> torch.Tensor:
    return img.mul(255).round_().to(torch.uint8)


def render(scenes: dict, img_size: int) -> torch.Tensor:
    """uint8 images (n,3,img_size,img_size) of a chunk of scenes (from :func:`sample_scenes`)."""
    n = len(scenes["label"])
    step = max(1, (1 << 22) // (img_size * img_size))                 # bound memory at large sizes
    out = torch.empty((n, 3, img_size, img_size), dtype=torch.uint8)
    threads = torch.get_num_threads()
    # One thread: these small element-wise ops gain little from more, and on a busy machine
    # OpenMP threads waiting for each other made rendering ~10x slower.
    torch.set_num_threads(1)
    try:
        for i in range(0, n, step):
            sub = {k: v[i:i + step] for k, v in scenes.items()}
            out[i:i + step] = to_uint8(_render_batch(sub, img_size))
    finally:
        torch.set_num_threads(threads)
    return out


def cache_dir() -> Path:
    """Where generated datasets are cached: $VITMLP_CACHE (default ~/.cache/vitmlp)."""
    return cache_root()


def generate(task: str = "layout", split: str = "train", n: int = 20000, img_size: int = 32,
             seed: int = 0, difficulty: float = 0.5, cache: bool = True,
             root: str | os.PathLike | None = None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Images (n,3,img_size,img_size) uint8, labels (n,) int64 and the generation config.

    Cached under ``root`` (default :func:`cache_dir`) as ``embedded/<task>-<split>-<hash>.pt``,
    keyed by the hash of the config (which holds :data:`GENERATOR_VERSION`); written atomically.
    """
    _check(task, split, difficulty)
    if int(n) < 1 or int(img_size) < 4:
        raise ValueError(f"need n >= 1 and img_size >= 4, got n={n}, img_size={img_size}")
    config = dict(task=task, split=split, n=int(n), img_size=int(img_size), seed=int(seed),
                  difficulty=float(difficulty), generator_version=GENERATOR_VERSION)
    path = Path(root).expanduser() if root is not None else cache_dir()
    path = path / "embedded" / f"{task}-{split}-{img_size}px-{config_hash(config)}.pt"
    if cache and path.exists():
        try:
            blob = torch.load(path, weights_only=True)
            return blob["images"], blob["labels"], config
        except Exception as e:  # truncated or foreign file: set aside, generate again
            set_aside(path, "unreadable data cache", e)
    images, labels = [], []
    for sc in sample_scenes(task, n, seed, split, difficulty):
        images.append(render(sc, img_size))
        labels.append(torch.as_tensor(sc["label"], dtype=torch.int64))
    images, labels = torch.cat(images), torch.cat(labels)
    if cache:
        atomic_torch_save({"images": images, "labels": labels, "config": config}, path)
    return images, labels, config


def plot_class_grid(images, labels=None, classes=None, per_class: int = 8, seed: int = 0,
                    cell: float = 1.0):
    """A matplotlib figure: one row per class, ``per_class`` random examples.

    ``images`` is uint8 (N,3,H,W) with ``labels`` and ``classes``, or an in-memory data set
    (anything with ``.images``, ``.labels``, ``.classes``, e.g. ``build_dataset("embedded", ...)``).
    """
    import matplotlib.pyplot as plt
    if hasattr(images, "images"):
        images, labels, classes = images.images, images.labels, images.classes
    g = np.random.default_rng(seed)
    labels = np.asarray(labels)
    fig, axes = plt.subplots(len(classes), per_class, squeeze=False,
                             figsize=(per_class * cell, len(classes) * cell))
    for c, name in enumerate(classes):
        idx = np.flatnonzero(labels == c)
        idx = g.choice(idx, min(per_class, len(idx)), replace=False) if len(idx) else idx
        for j, ax in enumerate(axes[c]):
            ax.set_xticks([]), ax.set_yticks([])
            if j < len(idx):
                ax.imshow(images[idx[j]].permute(1, 2, 0).numpy(), interpolation="nearest")
            else:
                ax.axis("off")
        axes[c, 0].set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
    fig.tight_layout()
    return fig
