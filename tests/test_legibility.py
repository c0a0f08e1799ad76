"""Figures are legible at the size the page shows them: text >= 9 pt once a figure wider than the
book's column is scaled down to it, in saved items and in what a notebook shows."""
import json
import subprocess
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import nbformat
import pytest
import torch

from vitmlp import diagrams, plots
from vitmlp.models.resmlp import ResMLPBlock
from vitmlp.results import save_item


def wide_figure():
    fig, axs = plt.subplots(1, 3, figsize=(13, 4.4))
    for ax in axs:
        ax.plot([1, 2, 3])
        ax.set(title="a title", xlabel="epochs")
        ax.legend(["run"], fontsize=7)
    return fig


def test_a_wide_figure_is_raised_to_the_pages_minimum_once():
    fig = wide_figure()
    assert plots.smallest_text_pt(fig) < 6             # 7-pt legend of a 13-inch figure shown 770 px wide
    plots.legible(fig)
    assert plots.MIN_PT - 0.1 <= plots.smallest_text_pt(fig) < plots.MIN_PT + 0.5
    sizes = [t.get_fontsize() for t in plots._texts(fig)]
    plots.legible(fig)                                  # idempotent
    assert [t.get_fontsize() for t in plots._texts(fig)] == sizes
    assert fig.axes[0].xaxis.get_ticklabels()[0].get_fontsize() >= sizes[0] - 0.01   # ticks follow


def test_a_narrow_figure_with_large_enough_text_is_left_alone():
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.set_xlabel("epochs")
    before = [t.get_fontsize() for t in plots._texts(fig)]
    plots.legible(fig)
    assert [t.get_fontsize() for t in plots._texts(fig)] == before and min(before) == 10.0


def test_a_diagram_keeps_the_text_sized_with_its_boxes():
    block = ResMLPBlock(96, 64)
    fig = diagrams.draw({"block": diagrams.read(block, torch.zeros(2, 64, 96))})
    before = [t.get_fontsize() for t in plots._texts(fig)]
    plots.legible(fig)
    assert [t.get_fontsize() for t in plots._texts(fig)] == before
    assert plots.smallest_text_pt(fig) >= plots.MIN_PT      # shown at its natural size, never scaled down


def test_a_saved_figure_records_its_smallest_text_as_shown(tmp_path, monkeypatch):
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path / "results"))
    side = save_item("resmlp", "Figure 1", "schematic", profile="smoke", source="x", figure=wide_figure())
    assert json.loads(side.read_text())["text_pt"] >= plots.MIN_PT - 0.1


def test_a_notebook_shows_its_figures_legibly(tmp_path):
    pm = pytest.importorskip("papermill")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in [
        "import matplotlib.pyplot as plt\nimport vitmlp\nfig, ax = plt.subplots(figsize=(14, 4))\nax.set_xlabel('x')\nplt.show()",
        "from vitmlp.plots import smallest_text_pt\nprint(round(smallest_text_pt(fig), 1))",
        "import torch\nfrom vitmlp import diagrams\nfrom vitmlp.models.resmlp import ResMLPBlock\n"
        "d = diagrams.draw({'block': diagrams.read(ResMLPBlock(96, 64), torch.zeros(2, 64, 96))})\nplt.show()"]])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "in.ipynb")
    pm.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), progress_bar=False,
                        kernel_name="python3")
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert any("image/png" in o.get("data", {}) for o in out.cells[0].outputs)
    assert float(out.cells[1].outputs[0]["text"]) >= plots.MIN_PT - 0.1   # changed before it was shown
    [shown] = [o for o in out.cells[0].outputs if "image/png" in o.get("data", {})]
    assert "classes" not in shown.get("metadata", {}).get("image/png", {})
    [diagram] = [o for o in out.cells[2].outputs if "image/png" in o.get("data", {})]
    assert diagram["metadata"]["image/png"]["classes"] == "diagram"       # the page keeps its natural size
