"""vitmlp.diagrams: the structure read from small models, one box per stage, refused arguments."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from timm.layers import Mlp, PatchEmbed  # noqa: E402
from timm.models.mlp_mixer import Affine  # noqa: E402

from vitmlp import diagrams  # noqa: E402
from vitmlp.models import create_model  # noqa: E402
from vitmlp.models.mixer import MixerBlock  # noqa: E402
from vitmlp.models.resmlp import ResMLPBlock  # noqa: E402
from vitmlp.models.stems import make_stem  # noqa: E402

# img 32, patch 4: N = S = 64 patches; ResMLP-S: 384 * 0.25 = 96 channels, 12 * 0.25 = 3 layers;
# Mixer-S: 512 * 0.25 = 128 channels, 8 * 0.5 = 4 layers, D_S = C / 2, D_C = 4C; 10 classes
SMALL = dict(img_size=32, patch_size=4, width_mult=0.25, num_classes=10)


@pytest.fixture(scope="module")
def resmlp():
    model = create_model("resmlp_S12", depth_mult=0.25, **SMALL).eval()
    net = diagrams.read(model, torch.zeros(2, 3, 32, 32), keep=(ResMLPBlock, PatchEmbed, Affine))
    layer = diagrams.read(model.blocks[0], torch.zeros(2, 64, 96), keep=(Affine,))
    return model, net, layer


@pytest.fixture(scope="module")
def mixer():
    model = create_model("mixer_S16", depth_mult=0.5, **SMALL).eval()
    net = diagrams.read(model, torch.zeros(2, 3, 32, 32), keep=(MixerBlock, PatchEmbed))
    layer = diagrams.read(model.blocks[0], torch.zeros(2, 64, 128), keep=(Mlp,))
    return model, net, layer


def by_name(stages):
    return {s.name: s for s in stages}


def test_resmlp_structure_matches_its_config(resmlp):
    model, net, layer = resmlp
    assert [s.kind for s in net] == ["input", "PatchEmbed", "ResMLPBlock", "Affine", "mean", "Linear"]
    assert [s.shape for s in net] == [(3, 32, 32), (64, 96), (64, 96), (64, 96), (96,), (10,)]
    assert net[2].members == [f"blocks.{i}" for i in range(3)] == [f"blocks.{i}" for i in range(len(model.blocks))]
    assert [s.kind for s in layer] == ["input", "Affine", "transpose", "Linear", "transpose", "mul", "add",
                                       "Affine", "Linear", "GELU", "Linear", "mul", "add"]
    s = by_name(layer)
    assert s["linear_tokens"].shape_in == s["linear_tokens"].shape == (96, 64)  # A acts across the 64 patches
    assert s["mlp_channels.fc1"].shape == (64, 384) and s["mlp_channels.fc2"].shape == (64, 96)
    assert [st.param for st in layer if st.kind == "mul"] == ["ls1", "ls2"]
    assert [st.inputs for st in layer if st.kind == "add"] == [[0, 5], [6, 11]]  # each skip from the branch's input
    assert diagrams.skips_hold(model.blocks[0], torch.randn(2, 64, 96), keep=(Affine,))


def test_mixer_structure_matches_its_config(mixer):
    model, net, layer = mixer
    assert [s.kind for s in net] == ["input", "PatchEmbed", "MixerBlock", "LayerNorm", "mean", "Linear"]
    assert [s.shape for s in net] == [(3, 32, 32), (64, 128), (64, 128), (64, 128), (128,), (10,)]
    assert len(net[2].members) == 4 == len(model.blocks)
    assert [s.kind for s in layer] == ["input", "LayerNorm", "transpose", "Mlp", "transpose", "add",
                                       "LayerNorm", "Mlp", "add"]
    s = by_name(layer)
    assert s["mlp_tokens"].shape == (128, 64) and s["mlp_tokens"].module.fc1.out_features == 64    # C x S, D_S
    assert s["mlp_channels"].shape == (64, 128) and s["mlp_channels"].module.fc1.out_features == 512  # S x C, D_C
    assert [st.inputs for st in layer if st.kind == "add"] == [[0, 4], [5, 7]]
    assert diagrams.skips_hold(model.blocks[0], torch.randn(2, 64, 128), keep=(Mlp,))


def test_skips_hold_only_with_a_skip_around_every_branch():
    class Half(nn.Module):  # one branch with a skip, one without
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.b(x + self.a(x))
    x = torch.randn(2, 3, 4)
    assert not diagrams.skips_hold(Half(), x)
    assert not diagrams.skips_hold(nn.Sequential(nn.Linear(4, 4), nn.GELU()), x)  # no residual at all


def test_a_stem_ends_in_one_tokens_stage():
    stem = make_stem("hmlp_bn", img_size=32, patch_size=16, embed_dim=64).eval()
    stages = diagrams.read(stem, torch.zeros(1, 3, 32, 32))
    assert [s.kind for s in stages[1:4]] == ["Conv2d", "BatchNorm2d", "GELU"]
    assert (stages[-1].name, stages[-1].shape) == ("flatten(2).transpose(1, 2)", (4, 64))


def stage_patches(fig):
    return [p for ax in fig.axes for p in ax.patches if (p.get_gid() or "").startswith("stage:")]


@pytest.mark.parametrize("direction", ["down", "right"])
def test_draw_gives_one_box_per_stage(resmlp, direction):
    model, net, layer = resmlp
    panels = {"network": net, "one layer": layer}
    fig = diagrams.draw(panels, direction=direction, zoom=("blocks.0", "one layer"), title="t",
                        labels={"linear_tokens": "{} = A"}, notes={("network", "stem"): "a note"}, symbols={64: "N"})
    assert isinstance(fig, Figure)
    assert sorted(p.get_gid() for p in stage_patches(fig)) == sorted(
        f"stage:{t}:{s.name}" for t, st in panels.items() for s in st)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "linear_tokens: Linear 64 → 64 = A" in texts and "a note" in texts
    plt.close(fig)


def test_draw_into_a_subfigure(mixer):
    fig = plt.figure(figsize=(4, 3))
    left, _ = fig.subfigures(1, 2)
    assert diagrams.draw({"layer": mixer[2]}, fig=left) is left
    assert len(stage_patches(fig)) == len(mixer[2])
    plt.close(fig)


def test_table_has_a_row_per_stage(mixer):
    _, net, layer = mixer
    t = diagrams.table({"network": net, "layer": layer}, labels={"transpose": "T"})
    assert len(t) == len(net) + len(layer) and list(t.columns) == ["panel", "stage", "kind", "operation", "input", "output"]
    assert (t[t.kind == "transpose"].operation == "T").all()


@pytest.mark.parametrize("call, message", [
    (lambda n: diagrams.draw({"n": n}, labels={"no_such_layer": "x"}), "labels name no stage.*no_such_layer"),
    (lambda n: diagrams.draw({"n": n}, notes={("other panel", "stem"): "x"}), "notes name no stage"),
    (lambda n: diagrams.draw({"n": n}, direction="up"), "unknown direction 'up'; valid choices: down, right"),
    (lambda n: diagrams.draw({"n": n}, zoom=("blocks.0", "missing")), "zoom must be"),
    (lambda n: diagrams.draw({}), "panels must be a non-empty dict"),
    (lambda n: diagrams.table({"n": [1, 2]}), "panels must be"),
    (lambda n: diagrams.read(nn.Linear(2, 2), [1.0, 2.0]), "example batch"),
    (lambda n: diagrams.read(nn.Linear(2, 2), torch.zeros(1, 2), keep=("Affine",)), "keep must be nn.Module classes"),
])
def test_bad_arguments_are_refused(resmlp, call, message):
    with pytest.raises(ValueError, match=message):
        call(resmlp[1])
