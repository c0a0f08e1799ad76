"""The figures every reduced item draws (the paper's and our differences, learning curves), and tables
as the book shows them."""
from __future__ import annotations

import math
import numbers

import pandas as pd


# --- legible at the size the page shows a figure ---------------------------------------------------
COLUMN_PX = 770    # the book's content column in a 1400-px window (sphinx-book-theme; measured in Chromium)
MIN_PT = 9.0       # the smallest text a page may show
SCREEN_DPI = 100   # the lower of the two resolutions a figure is rendered at (inline 100, saved 120)
# set on a figure whose text is sized with its boxes (a diagram): the page shows it at its natural size,
# scrolling sideways where it is wider than the column (book/_static/custom.css, class "diagram")
NATURAL_SIZE = "_vitmlp_natural_size"


def shown_pt(fig, size_pt: float = 1.0) -> float:
    """The size (CSS pt) a text of ``size_pt`` shows at on the page: images wider than the column are
    scaled down to it, so a wide figure's text shrinks with it (diagrams are not)."""
    if getattr(fig, NATURAL_SIZE, False):
        return size_pt * SCREEN_DPI / 96
    width_px = fig.get_tightbbox().width * SCREEN_DPI
    return size_pt * SCREEN_DPI / 96 * min(1.0, COLUMN_PX / width_px)


def _texts(fig):
    from matplotlib.text import Text
    fig.draw_without_rendering()   # tick labels exist only once the figure has been drawn
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def smallest_text_pt(fig) -> float:
    """The smallest text of ``fig`` as the page shows it (inf for a figure without text)."""
    texts = _texts(fig)
    return shown_pt(fig, min(t.get_fontsize() for t in texts)) if texts else math.inf


def legible(fig, min_pt: float = MIN_PT):
    """Raise every text of ``fig`` (labels, ticks, legends, annotations) to the size that shows at
    ``min_pt`` on the page, then lay the figure out again; idempotent. Diagrams, which size their text
    with their boxes and are shown at their natural size, are left as drawn."""
    import warnings

    from matplotlib.layout_engine import PlaceHolderLayoutEngine   # what a finished fig.tight_layout() leaves
    if getattr(fig, NATURAL_SIZE, False):
        return fig
    for _ in range(4):   # larger text widens the figure's tight box: repeat to a fixed point
        need = min_pt / shown_pt(fig)
        small = [t for t in _texts(fig) if t.get_fontsize() < need - 0.01]
        if not small:
            break
        for ax in fig.axes:   # ticks made after this (a redraw) take the axis's size, not the Text's
            for axis in (ax.xaxis, ax.yaxis):
                size = axis.get_ticklabels()[0].get_fontsize() if axis.get_ticklabels() else need
                axis.set_tick_params(which="both", labelsize=max(size, need))
        for t in small:
            t.set_fontsize(need)
        if fig.get_layout_engine() is None or isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
            with warnings.catch_warnings():   # axes placed by hand (add_axes) are left where they are
                warnings.simplefilter("ignore")
                fig.tight_layout()
    return fig


def show_figures_legibly() -> None:
    """In a notebook, every figure is made legible before it is shown, and a diagram carries the
    image class that shows it at its natural size (in the output's metadata; ``book.publish`` hands
    it to myst-nb). The inline backend's PNG formatter is wrapped: registered first by importing the
    backend (matplotlib does so only at the first figure), checked again after each cell, as
    ``%matplotlib inline`` registers a new one. Outside IPython, nothing."""
    import sys
    if "IPython" not in sys.modules or (ip := sys.modules["IPython"].get_ipython()) is None:
        return
    import matplotlib
    from matplotlib.figure import Figure
    if "inline" in str(matplotlib.rcParams._get("backend")):
        import matplotlib_inline.backend_inline  # noqa: F401  (its import registers the formatter now)
    png = ip.display_formatter.formatters["image/png"]

    def wrap(*_):
        shown = png.type_printers.get(Figure)
        if shown is not None and not getattr(shown, "legible", False):
            def print_legibly(fig):
                png_data = shown(legible(fig))
                return (png_data, {"classes": "diagram"}) if getattr(fig, NATURAL_SIZE, False) else png_data
            print_legibly.legible = True
            png.for_type(Figure, print_legibly)
    wrap()
    ip.events.register("post_execute", wrap)


# one colour per model family across the book's figures (tab10's, colour-blind-safe order)
FAMILY_COLORS = {"ViT": "#1f77b4", "ResMLP": "#2ca02c", "Mixer": "#ff7f0e", "convnet": "#d62728",
                 "BiT": "#9467bd", "bag of patches": "#7f7f7f", "other": "#8c564b"}
_FAMILY_OF = [("bag", "bag of patches"), ("resmlp", "ResMLP"), ("feedforward", "ResMLP"), ("mixer", "Mixer"),
              ("deit", "ViT"), ("vit", "ViT"), ("cait", "ViT"), ("transformer", "ViT"), ("resnet", "convnet"),
              ("convnet", "convnet"), ("convolutional", "convnet"), ("efficientnet", "convnet"),
              ("regnet", "convnet"), ("bit", "BiT")]


def family(name: str) -> str:
    """The model family of a label or model name ("Mixer-B/16", "resmlp_S12", "DeiT-S", "bag of
    patches", ResMLP Table 1's "Convolutional networks"): ViT (DeiT, CaiT), ResMLP, Mixer, convnet, BiT,
    bag of patches, else "other"."""
    low = name.lower().replace("timm:", "")
    return next((fam for key, fam in _FAMILY_OF if low.startswith(key)), "other")


def family_color(name: str) -> str:
    """The family's colour of :data:`FAMILY_COLORS`, for a label or model name."""
    return FAMILY_COLORS[family(name)]


def number(v: float) -> str:
    """A float as a table shows it when no format is given: 2 decimals up to 100, 1 above, 3
    significant digits below 1 (an lr of 0.004 stays 0.004), never pandas' six decimals."""
    if not math.isfinite(v) or v == 0 or abs(v) >= 1:
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.2f}"
    return f"{v:.3g}"


def _numbers_only(fmt):
    if not isinstance(fmt, str):
        return fmt
    return lambda v: fmt.format(v) if isinstance(v, numbers.Real) and not isinstance(v, bool) else str(v)


PROSE_CHARS = 60   # a text cell longer than this is a sentence


def show(df: pd.DataFrame, fmt=None, na: str = "—"):
    """``df`` as a page shows it: no 0..n index, numbers by ``fmt`` (a format or {column: format};
    other float columns by :func:`number`), missing cells as ``na``; the book's table style. A named
    index (a pivot, a group-by) becomes columns: it is data, not a row number."""
    if any(n is not None for n in df.index.names):
        df = df.reset_index()
    floats = [c for c in df.columns if pd.api.types.is_float_dtype(df[c])]
    style = df.style.format(number, subset=floats, na_rep=na).format(na_rep=na, subset=[
        c for c in df.columns if c not in floats])
    if isinstance(fmt, dict):   # a number format leaves a text cell of the column as it is
        style = style.format({c: _numbers_only(f) for c, f in fmt.items()}, subset=list(fmt), na_rep=na)
    elif fmt is not None:
        style = style.format(fmt, na_rep=na)
    # a column of sentences (a verdict's reason) keeps a reading width: squeezed by the numbers, its
    # rows grew a dozen lines tall; the table scrolls sideways instead
    prose = [c for c in df.columns if c not in floats and df[c].astype(str).str.len().max() > PROSE_CHARS]
    if prose:
        style = style.set_properties(subset=prose, **{"min-width": "32em"})
    return style.hide(axis="index").set_table_attributes('class="dataframe"')


def _delta_bars(ax, t: pd.DataFrame, names, profile: str, fontsize=None) -> None:
    """The paper's (grey) and our (blue, with the 95 % interval ``ci_lo``..``ci_hi``) differences of the
    rows of ``t`` on ``ax``, one row per name of ``names``: a row that did not train has no bar (its -90
    points would squash the others) and a grey band, a row not at its plateau says so in its name."""
    if not {"ci_lo", "ci_hi"} <= set(t.columns):
        raise ValueError("the plot needs the intervals as numbers: make the table with "
                         "stats.compare(..., numbers=True) or stats.compare_pairs")
    half = [(hi - lo) / 2 if pd.notna(lo) else 0.0 for lo, hi in zip(t.ci_lo, t.ci_hi)]
    y = list(range(len(t)))[::-1]
    why = t.why.astype(str) if "why" in t else pd.Series("", index=t.index)
    untrained, unsettled = why.str.startswith("did not train"), why.str.startswith("not at the plateau")
    ax.barh([v + 0.2 for v in y], t["paper Δ"].astype(float), height=0.4, color="0.7", label="paper")
    ax.barh([v - 0.2 for v in y], t["ours Δ"].astype(float).where(~untrained), height=0.4, color="C0",
            xerr=[0.0 if u else h for h, u in zip(half, untrained)],
            label=f"this book ({profile} profile, 95 % interval over seeds; none for one seed)")
    ax.set_yticks(y, [n + (" (did not train)" if u else " (not at its plateau)" if p else "")
                      for n, u, p in zip(names, untrained, unsettled)], fontsize=fontsize)
    for v, u in zip(y, untrained):
        if u:
            ax.axhspan(v - 0.5, v + 0.5, color="0.9", zorder=0)
    ax.axvline(0, color="k", lw=0.8)


def plot_deltas(table: pd.DataFrame, base: str, title: str, profile: str):
    """Bars of the paper's and our differences to the baseline, ours with the 95 % Welch interval of
    the table (:func:`stats.compare` with ``numbers=True``; a row read at twice the epochs shows that
    interval). A table with a ``vs`` column (rows of several series) takes each row's difference to
    its own row."""
    import matplotlib.pyplot as plt
    vs = table["vs"] if "vs" in table else pd.Series(base, index=table.index)
    t = table[table.row != vs]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(t) + 1.6))
    _delta_bars(ax, t, list(t.row), profile)
    ax.set_xlabel(f"top-1 difference to {base} (points)" if vs.nunique() == 1 else
                  "top-1 difference to the row's baseline (points)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, ncol=2, frameon=False)
    ax.set_title(title, pad=28)
    fig.tight_layout()
    return fig


def plot_pairs(table: pd.DataFrame, title: str, profile: str):
    """Bars of the paper's and our differences of each pair of :func:`stats.compare_pairs`, ours with its
    95 % interval (none for one seed); rows that did not train are greyed, rows not at their plateau
    named so."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(table) + 2.0))
    _delta_bars(ax, table, [f"{r} vs {b}" for r, b in zip(table.row, table.vs)], profile, fontsize=8)
    ax.set_xlabel("top-1 difference (points)")
    # above the bars, never on them; beside them it took the width the long pair names leave the axis
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=8, frameon=False)
    ax.set_title(title, pad=44)
    fig.tight_layout()
    return fig


def curves(df: pd.DataFrame, key: str = "val_top1") -> pd.DataFrame:
    """Long table of one curve per run: label, seed, epoch, value."""
    rows = [{"label": r.label, "seed": r.seed, "epoch": e, key: v}
            for r in df.itertuples() for e, v in zip(r.curves.get("epoch", []), r.curves.get(key, []))]
    return pd.DataFrame(rows, columns=["label", "seed", "epoch", key])


def plot_outcomes(ax, labels, ours, outcomes, chance: float, colors=None) -> None:
    """Rows of a table whose paper cells can read ``crash`` (Scaled ReLU Tables 1-3, 5): a bar of our
    mean top-1 per row (none where every run crashed) and the row's outcome written in red where a
    run crashed (``stats.outcome``: ``crash (step 37)``), so a crash never reads as a low number."""
    y = list(range(len(labels)))[::-1]
    ax.barh(y, [0 if v != v else v for v in ours], color=colors or "C0")
    for yi, text in zip(y, outcomes):
        if "crash" in text:
            ax.text(chance, yi, " " + text, va="center", fontsize=7, color="C3")
    ax.axvline(chance, color="0.6", lw=0.8, ls=":")
    ax.set_yticks(y, labels, fontsize=7)
