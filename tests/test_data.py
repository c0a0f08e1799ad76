"""The data layer: embedded dataset (determinism, splits, resolution, cache, no colour shortcut),
Mixer shuffles, batched augmentation, the trainer's batches, real loaders on local stand-ins."""
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vitmlp.data import (build_dataset, global_pixel_shuffle, patch_pixel_shuffle,
                         random_crop_flip, synthetic)
from vitmlp.data.transforms import seeded_generator
from vitmlp.records import config_hash
from vitmlp.train import Batches, epoch_batches


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "cache"))   # never touch the user's cache


def gen(task="layout", split="train", n=200, img_size=32, seed=0, difficulty=0.5):
    return synthetic.generate(task, split, n, img_size, seed, difficulty, cache=False)[:2]


# --------------------------------------------------------------------------- embedded dataset

@pytest.mark.parametrize("task", list(synthetic.TASKS))
def test_same_seed_same_bytes_other_seed_differs(task):
    x1, y1 = gen(task, seed=1)
    x2, y2 = gen(task, seed=1)
    x3, _ = gen(task, seed=2)
    assert x1.dtype == torch.uint8 and x1.shape == (200, 3, 32, 32)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert (x1 != x3).float().mean() > 0.5


def test_prefix_stable_and_balanced():
    x_small, y_small = gen(n=50)
    x_big, y_big = gen(n=1500)                  # spans two random streams
    assert torch.equal(x_small, x_big[:50]) and torch.equal(y_small, y_big[:50])
    counts = torch.bincount(gen(n=1000)[1], minlength=10)
    assert counts.tolist() == [100] * 10         # every chunk is class-balanced


def test_splits_are_disjoint():
    imgs = {s: gen(split=s, n=300)[0].flatten(1) for s in synthetic.SPLITS}
    hashes = {s: {bytes(r.numpy()) for r in v} for s, v in imgs.items()}
    assert all(len(h) == 300 for h in hashes.values())             # no duplicate scenes within
    assert not hashes["train"] & hashes["val"] and not hashes["train"] & hashes["test"]
    assert not hashes["val"] & hashes["test"]
    # the scene streams differ, not only the pixels: no shared background spectrum
    bg = {s: next(synthetic.sample_scenes("arrangement", 300, 0, s))["bg_coef"][:, 0, 9, 9]
          for s in synthetic.SPLITS}
    assert not set(bg["train"].tolist()) & set(bg["val"].tolist())


@pytest.mark.parametrize("task", list(synthetic.TASKS))
def test_same_scene_at_two_resolutions(task):
    scenes = next(synthetic.sample_scenes(task, 100, seed=3))
    lo = synthetic.render(scenes, 32).float()
    hi = synthetic.render(scenes, 64).float()
    assert hi.shape == (100, 3, 64, 64)
    diff = (F.avg_pool2d(hi, 2) - lo).abs()                         # 2x2 box = one 32-px pixel
    assert diff.mean() < 1.5                                         # grey levels of 255
    assert diff.mean((1, 2, 3)).max() < 3.0                          # every image, not only on average
    other = (F.avg_pool2d(hi, 2) - lo.roll(1, 0)).abs().mean()       # a different scene
    assert other > 20 * diff.mean()


def test_cache_hit_returns_identical_data_without_rendering(tmp_path, monkeypatch):
    x1, y1, cfg = synthetic.generate("arrangement", "val", 120, 32, seed=5, root=tmp_path)
    files = list((tmp_path / "embedded").iterdir())
    assert len(files) == 1 and files[0].suffix == ".pt"              # no temp file left behind
    assert config_hash(cfg) in files[0].name and cfg["generator_version"] == synthetic.GENERATOR_VERSION

    def boom(*a, **k):
        raise AssertionError("rendered again despite a cache hit")
    monkeypatch.setattr(synthetic, "render", boom)
    x2, y2, _ = synthetic.generate("arrangement", "val", 120, 32, seed=5, root=tmp_path)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    with pytest.raises(AssertionError, match="rendered again"):      # another config is a miss
        synthetic.generate("arrangement", "val", 120, 32, seed=6, root=tmp_path)


def test_build_dataset_embedded_uses_env_cache(tmp_path):
    ds = build_dataset("embedded", "val", 32, n=64)
    assert list((tmp_path / "cache" / "embedded").glob("*.pt"))
    x, y = ds[0]
    assert x.dtype == torch.float32 and x.shape == (3, 32, 32) and 0 <= y < 10
    assert ds.classes == list(synthetic.TASKS["layout"]) and ds.num_classes == 10
    assert ds.classes[:3] == ["row_2", "column_2", "row_3"]
    a = build_dataset("embedded", "val", 32, n=64, task="arrangement")
    assert a.classes[2] == "diagonal" and a.hflip_classes[2] == 3 and not torch.equal(a.images, ds.images)
    t = build_dataset("embedded_transfer", "val", 48, n=64)
    assert t.classes == ["two", "three", "four", "five", "six", "seven"] and t[0][0].shape == (3, 48, 48)
    assert ds.info["config_hash"] != t.info["config_hash"]


@pytest.mark.parametrize("task", list(synthetic.TASKS))
def test_mean_colour_does_not_give_the_label(task):
    from sklearn.linear_model import LogisticRegression
    xtr, ytr = gen(task, "train", 2000)
    xte, yte = gen(task, "val", 1500)
    feat = lambda x: x.float().mean((2, 3)).numpy() / 255                         # (N,3) mean RGB
    acc = LogisticRegression(max_iter=1000).fit(feat(xtr), ytr).score(feat(xte), yte)
    chance = 1 / len(synthetic.TASKS[task])
    assert acc < chance + 0.05, acc   # measured (v6): layout 0.09, arrangement 0.10, count 0.18 (1/6=0.167)


@pytest.mark.parametrize("task, difficulty, ceiling", [
    ("layout", 0.5, 0.35),        # measured 0.28: objects are brighter than the ground, and at the
                                  # default difficulty arrangements move over 40 % of the room only
    ("layout", 1.0, 0.15),        # measured 0.11: arrangements anywhere
    ("arrangement", 1.0, 0.15),   # measured 0.11 (0.61 at difficulty 0.5: not the default task)
])
def test_position_aware_linear_probe_stays_weak(task, difficulty, ceiling):
    """Mean colour of each of the 8x8 patches (4 px), a linear classifier: it may learn where
    bright objects tend to sit, no more. A bag of patches never sees positions at all."""
    from sklearn.linear_model import RidgeClassifier
    xtr, ytr = gen(task, "train", 2000, difficulty=difficulty)
    xte, yte = gen(task, "val", 1500, difficulty=difficulty)
    grid = lambda x: F.avg_pool2d(x.float() / 255, 4).flatten(1).numpy()           # (N,192)
    assert RidgeClassifier().fit(grid(xtr), ytr).score(grid(xte), yte) < ceiling


def test_hflip_label_map_matches_mirrored_templates():
    names = synthetic.TASKS["arrangement"]
    perm = synthetic.HFLIP["arrangement"]
    assert sorted(perm) == list(range(10)) and all(perm[perm[c]] == c for c in range(10))
    canon = lambda pts: sorted(map(tuple, np.round(pts, 6).tolist()))
    for c, t in enumerate(synthetic._TEMPLATES):
        mirrored = t * np.array([-1.0, 1.0])
        assert canon(mirrored) == canon(synthetic._TEMPLATES[perm[c]]), names[c]
    assert names[perm[names.index("diagonal")]] == "antidiagonal"


def test_difficulty_and_task_validated():
    with pytest.raises(ValueError, match="difficulty"):
        synthetic.generate("arrangement", "train", 10, 32, difficulty=1.5, cache=False)
    with pytest.raises(ValueError, match="valid choices: layout, arrangement, count"):
        synthetic.generate("shapes", "train", 10, 32, cache=False)
    with pytest.raises(ValueError, match="task of dataset embedded 'count'; valid choices: layout, arrangement"):
        build_dataset("embedded", "train", 32, task="count")


def test_class_grid_figure():
    import matplotlib
    matplotlib.use("Agg")
    x, y = gen(n=200)
    fig = synthetic.plot_class_grid(x, y, synthetic.TASKS["layout"], per_class=4)
    assert len(fig.axes) == 40 and fig.axes[0].get_ylabel() == "row_2"
    assert sum(len(a.images) for a in fig.axes) == 40
    ds = build_dataset("embedded_transfer", "val", 32, n=100)
    fig = synthetic.plot_class_grid(ds, per_class=3)                 # a data set works too
    assert len(fig.axes) == 18 and fig.axes[3].get_ylabel() == "three"


# --------------------------------------------------------------------------- transforms

def test_patch_pixel_shuffle_is_the_mixer_permutation():
    s = patch_pixel_shuffle(16, 4, seed=0)
    perm = s.perm
    assert sorted(perm.tolist()) == list(range(256))
    # each output patch is one input patch, its pixels reordered by ONE shared permutation
    src = perm.view(4, 4, 4, 4).permute(0, 2, 1, 3).reshape(16, 16)      # (out patch, pixel) -> source
    src_patch = (src // 16 // 4) * 4 + (src % 16) // 4
    src_pixel = (src // 16 % 4) * 4 + src % 4
    assert (src_patch == src_patch[:, :1]).all()                         # whole patches move
    assert sorted(src_patch[:, 0].tolist()) == list(range(16))
    assert (src_pixel == src_pixel[:1]).all()                            # shared pixel permutation
    assert not torch.equal(src_pixel[0], torch.arange(16))
    assert torch.equal(patch_pixel_shuffle(16, 4, seed=0).perm, perm)     # fixed given the seed
    assert not torch.equal(patch_pixel_shuffle(16, 4, seed=1).perm, perm)


@pytest.mark.parametrize("make", [lambda: patch_pixel_shuffle(32, 4, 7), lambda: global_pixel_shuffle(32, 7)])
def test_shuffles_are_fixed_permutations_with_inverse(make):
    s = make()
    x = torch.rand(5, 3, 32, 32)
    out = s(x)
    assert not torch.equal(out, x)
    assert torch.equal(s.inverse()(out), x)
    assert torch.equal(torch.sort(out.flatten(2)).values, torch.sort(x.flatten(2)).values)
    assert torch.equal(out[2], s(x[2]))                  # same permutation for every image
    # channels move together: the RGB triple of a pixel stays one pixel
    assert torch.equal(out[:, 0].flatten(1), x[:, 0].flatten(1)[:, s.perm])
    assert torch.equal(out[:, 2].flatten(1), x[:, 2].flatten(1)[:, s.perm])
    with pytest.raises(ValueError, match="32x32"):
        s(torch.rand(1, 3, 16, 16))


def test_crop_flip_batched():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8) % 251 + 1   # distinct, > 0
    y = torch.tensor([2, 4])
    flips = 0
    for k in range(20):
        out, yo = random_crop_flip(x, y, seeded_generator(0, k), pad=0, hflip_classes=synthetic.HFLIP["arrangement"])
        for i in range(2):
            if torch.equal(out[i], x[i].flip(-1)):
                flips += 1
                assert yo[i] == {2: 3, 4: 5}[int(y[i])]      # diagonal -> antidiagonal, corner_tl -> tr
            else:
                assert torch.equal(out[i], x[i]) and yo[i] == y[i]
    assert 5 < flips < 35
    out, _ = random_crop_flip(x, y, seeded_generator(1), pad=2, flip=False)
    assert out.shape == x.shape
    # every crop is a shifted window of the zero-padded image
    xp = F.pad(x, (2, 2, 2, 2))
    for i in range(2):
        assert any(torch.equal(out[i], xp[i, :, a:a + 8, b:b + 8]) for a in range(5) for b in range(5))
    u8, _ = random_crop_flip(x.to(torch.uint8), y, seeded_generator(1), pad=2, flip=False)
    assert u8.dtype == torch.uint8 and torch.equal(u8.float(), out)


# --------------------------------------------------------------------------- loaders

def test_batches_index_positions_augment_by_generator_and_normalise():
    ds = build_dataset("embedded", "train", 32, n=300, seed=0)
    order = epoch_batches(len(ds), 64, seed=3, epoch=2)
    assert order.shape == (4, 64)                             # last partial batch dropped
    plain = Batches(ds)
    (x, y), = plain([order[0]])
    xin, yin = plain.inputs(x, y, "cpu")
    ref, yref = ds.get_batch(order[0])
    assert x.dtype == torch.uint8 and torch.allclose(xin, ref, atol=1e-6) and torch.equal(yin, yref)
    aug = Batches(ds, augment=True)
    a1 = aug.inputs(x, y, "cpu", torch.Generator().manual_seed(7))[0]
    assert torch.equal(a1, aug.inputs(x, y, "cpu", torch.Generator().manual_seed(7))[0])   # replayable
    assert not torch.equal(a1, aug.inputs(x, y, "cpu", torch.Generator().manual_seed(8))[0])
    assert torch.equal(aug.inputs(x, y, "cpu")[0], xin)      # no generator (evaluation): not augmented


def test_batches_apply_the_pixel_shuffle_after_normalising():
    ds = build_dataset("embedded", "val", 32, n=40)
    shuffle = global_pixel_shuffle(32, seed=0)
    (x, y), = Batches(ds)([torch.arange(40)])
    plain = Batches(ds).inputs(x, y, "cpu")[0]
    shuffled = Batches(ds, shuffle=shuffle).inputs(x, y, "cpu")[0]
    assert torch.equal(shuffle.inverse()(shuffled), plain) and not torch.equal(shuffled, plain)


def _write_fake_cifar(root, n_per_batch=4, cifar100=False):
    g = np.random.default_rng(0)
    base = root / ("cifar-100-python" if cifar100 else "cifar-10-batches-py")
    base.mkdir(parents=True)
    key = "fine_labels" if cifar100 else "labels"
    files = ["train", "test"] if cifar100 else [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    written = {}
    for f in files:
        data = g.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8)
        labels = g.integers(0, 100 if cifar100 else 10, n_per_batch).tolist()
        with open(base / f, "wb") as fh:
            pickle.dump({"data": data, key: labels, "batch_label": f}, fh)
        written[f] = (data, labels)
    meta = ("meta", "fine_label_names", 100) if cifar100 else ("batches.meta", "label_names", 10)
    with open(base / meta[0], "wb") as fh:
        pickle.dump({meta[1]: [f"class{i}" for i in range(meta[2])]}, fh)
    return written


def test_cifar10_from_a_local_stand_in(tmp_path):
    written = _write_fake_cifar(tmp_path)
    tr = build_dataset("cifar10", "train", 32, root=tmp_path, verify_md5=False)
    te = build_dataset("cifar10", "val", 32, root=tmp_path, verify_md5=False)   # val = test batch
    assert len(tr) == 20 and len(te) == 4 and tr.classes[3] == "class3" and tr.num_classes == 10
    data, labels = written["test_batch"]
    assert torch.equal(te.images, torch.from_numpy(data).view(4, 3, 32, 32))   # torchvision layout
    assert te.labels.tolist() == labels
    x, _ = te[1]
    back = x * torch.tensor(te.std).view(3, 1, 1) + torch.tensor(te.mean).view(3, 1, 1)
    assert torch.allclose(back * 255, te.images[1].float(), atol=1e-3)
    assert build_dataset("cifar10", "test", 64, root=tmp_path, verify_md5=False)[0][0].shape == (3, 64, 64)
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):           # checksums differ
        build_dataset("cifar10", "train", 32, root=tmp_path)


def test_cifar100_stand_in_and_missing_files(tmp_path):
    _write_fake_cifar(tmp_path / "c100", cifar100=True)
    ds = build_dataset("cifar100", "train", 32, root=tmp_path / "c100", verify_md5=False)
    assert len(ds) == 4 and ds.num_classes == 100
    with pytest.raises(FileNotFoundError, match=r"extract it into .*empty"):
        build_dataset("cifar100", "train", 32, root=tmp_path / "empty")


def test_imagefolder_from_generated_pngs(tmp_path):
    from PIL import Image
    g = np.random.default_rng(0)
    for split, n in (("train", 3), ("val", 2)):
        for cls in ("cat", "dog"):
            d = tmp_path / split / cls
            d.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(g.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(d / f"{i}.png")
    tr = build_dataset("imagefolder", "train", 32, root=tmp_path)
    va = build_dataset("imagefolder", "val", 32, root=tmp_path)
    assert len(tr) == 6 and len(va) == 4 and tr.classes == ["cat", "dog"]
    x, y = va[3]
    assert x.shape == (3, 32, 32) and y == 1
    assert torch.equal(va[0][0], va[0][0])                                    # eval transform: fixed
    aug = tr.with_augmentation(True)
    assert aug.augment and not tr.augment and len(aug) == len(tr)
    batches = Batches(aug)                                 # file-backed: read through a DataLoader
    assert len(batches) == 6 and batches.num_classes == 2
    (xb, yb), = batches([torch.tensor([0, 5, 2, 3])])
    assert xb.shape == (4, 3, 32, 32) and xb.dtype == torch.float32 and yb.tolist() == [0, 1, 0, 1]
    assert build_dataset("imagefolder", "test", 32, root=tmp_path).info["root"].endswith("val")
    with pytest.raises(ValueError, match="root="):
        build_dataset("imagefolder", "train", 32)
    with pytest.raises(FileNotFoundError, match="train"):
        build_dataset("imagefolder", "train", 32, root=tmp_path / "nothing")


def test_digits_split_is_fixed_and_disjoint():
    tr = build_dataset("digits", "train", 32)
    te = build_dataset("digits", "test", 32)
    assert (len(tr), len(te)) == (1257, 540) and tr.classes == [str(i) for i in range(10)]
    assert tr.images.shape[1:] == (3, 8, 8) and tr[0][0].shape == (3, 32, 32)
    assert torch.equal(tr.images[:, 0], tr.images[:, 2])                       # grey as RGB
    a = {bytes(r.numpy()) for r in tr.images.flatten(1)}
    assert len(a & {bytes(r.numpy()) for r in te.images.flatten(1)}) <= 2      # digits has 1 duplicate pair
    assert torch.equal(build_dataset("digits", "train", 32).labels, tr.labels)
    assert torch.bincount(te.labels).min() >= 50                               # stratified


def test_bad_names_and_options_are_refused():
    with pytest.raises(ValueError, match="valid choices: embedded, embedded_transfer, cifar10, cifar100, imagefolder, digits"):
        build_dataset("imagenet", "train", 32)
    with pytest.raises(ValueError, match="valid choices: train, val, test"):
        build_dataset("embedded", "training", 32)
    with pytest.raises(ValueError, match="valid choices: n, seed, difficulty, cache, task"):
        build_dataset("embedded", "train", 32, size=10)
    with pytest.raises(ValueError, match="valid choices: verify_md5"):
        build_dataset("cifar10", "train", 32, download=True)
    with pytest.raises(ValueError, match=r"option for dataset digits 'n'; valid choices: \(none\)"):
        build_dataset("digits", "train", 32, n=10)
