"""Architecture schematics drawn from a built model (ResMLP and Mixer Figure 1, Three things Figure 5).

:func:`read` runs one input through the model and records, in call order, every module call
(leaf modules, or whole modules of the classes in ``keep``) and every tensor operation between
them (transpose, add, multiplication by a parameter, mean, ...), with the tensor each stage reads
(so a residual ``add`` knows where its skip comes from) and its output shape. :func:`draw` lays
out such chains as boxes and arrows. Identity, Dropout and DropPath are left out (no-ops at
inference); consecutive calls of one ``keep`` class, each reading the last, become one stage
("12 x ResMLPBlock").

    net = read(model, torch.zeros(1, 3, 224, 224), keep=(ResMLPBlock, PatchEmbed, Affine))
    layer = read(model.blocks[0], torch.zeros(1, 196, 384), keep=(Affine,))
    fig = draw({"the network": net, "one layer": layer}, zoom=("blocks.0", "one layer"))
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.nn as nn
from timm.layers import DropPath
from torch.overrides import TorchFunctionMode

from .choices import check_choice
from .plots import NATURAL_SIZE

PASS_THROUGH = (nn.Identity, nn.Dropout, DropPath)
LAYOUT = {"transpose", "permute", "flatten", "unflatten", "reshape", "view", "contiguous"}
FS, FS_SMALL = 10.0, 9.0  # points: box text, shapes and notes (shown unscaled: >= 9 pt on the page)
R, TITLE = 0.13, 0.45  # inches: radius of a "+" circle, room for a panel title
SKIP, NOTE = "#c0392b", "#a33"  # colours: skip connections, notes beside a box


@dataclass
class Stage:
    """One box: a module call (``name`` = module path) or a tensor operation (``name`` = the call)."""
    name: str
    kind: str                      # the module's class, or the operation ("transpose", "add", ...)
    shape: tuple                   # output shape, batch dimension left out
    shape_in: tuple = ()
    inputs: list = field(default_factory=list)   # indices of the stages it reads
    module: nn.Module | None = None
    param: str | None = None       # the model parameter an operation uses (LayerScale's ls1)
    members: list = field(default_factory=list)  # module paths of the repeated calls it stands for


class _Recorder(TorchFunctionMode):
    def __init__(self, model, example, keep):
        super().__init__()
        self.stages = [Stage("input", "input", tuple(example.shape[1:]))]
        self.src, self.alive = {id(example): 0}, [example]  # alive: no id is reused while recording
        self.params = {id(p): n for n, p in model.named_parameters()}
        self.names = {m: n or type(m).__name__ for n, m in model.named_modules()}
        self.depth = 0  # > 0 inside a recorded module: its own operations are not stages
        self.hooks = [h for m in model.modules() if isinstance(m, keep) or not any(m.children())
                      for h in (m.register_forward_pre_hook(self.enter), m.register_forward_hook(self.leave))]

    def enter(self, m, args):
        self.depth += 1

    def leave(self, m, args, out):
        self.depth -= 1
        x = next((a for a in args if isinstance(a, torch.Tensor)), None)
        out = out[0] if isinstance(out, (tuple, list)) else out
        if self.depth or x is None or id(x) not in self.src:
            return
        if isinstance(m, PASS_THROUGH):
            self.track(out, self.src[id(x)])
        else:
            self.add(Stage(self.names[m], type(m).__name__, tuple(out.shape[1:]), tuple(x.shape[1:]),
                           [self.src[id(x)]], module=m), out)

    def track(self, t, i):
        self.src[id(t)] = i
        self.alive.append(t)

    def add(self, stage, out):
        taken, name, k = {s.name for s in self.stages}, stage.name, 1
        while stage.name in taken:  # the second transpose(1, 2) of a block: "transpose(1, 2) #2"
            k += 1
            stage.name = f"{name} #{k}"
        self.stages.append(stage)
        self.track(out, len(self.stages) - 1)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        flat = [b for a in (*args, *kwargs.values()) for b in (a if isinstance(a, (list, tuple)) else [a])]
        ins = [self.src[id(a)] for a in flat if isinstance(a, torch.Tensor) and id(a) in self.src]
        if self.depth or not isinstance(out, torch.Tensor) or not ins:
            return out
        op = getattr(func, "__name__", str(func))
        op = op.strip("_").removeprefix("r") if op.startswith("__") else op  # __radd__ -> add
        param = next((self.params[id(a)] for a in flat if id(a) in self.params), None)
        consts = [repr(a) for a in args[1:] if not isinstance(a, torch.Tensor)]
        consts += [f"{k}={v!r}" for k, v in kwargs.items() if not isinstance(v, torch.Tensor)]
        call = f"{op}({', '.join([param] if param else consts)})" if param or consts else op
        shape, last = tuple(out.shape[1:]), self.stages[-1]
        if op in LAYOUT and shape == self.stages[ins[0]].shape:
            self.track(out, ins[0])  # a reshape to the same shape: nothing to draw
        elif op in LAYOUT and ins == [len(self.stages) - 1] and last.module is None and last.kind in LAYOUT | {"reshape"}:
            last.name, last.shape, last.kind = f"{last.name}.{call}", shape, "reshape"  # one box per chain
            self.track(out, ins[0])
        else:
            self.add(Stage(call, op, shape, self.stages[ins[0]].shape, ins, param=param), out)
        return out


def read(model: nn.Module, example: torch.Tensor, keep: tuple = ()) -> list[Stage]:
    """The stages ``model`` runs on ``example`` (a batch; shapes leave the batch dimension out), in
    call order, stage 0 being the input; ``keep``: module classes recorded as one stage each, not opened."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"read needs an nn.Module, got {type(model).__name__}")
    if not isinstance(example, torch.Tensor) or example.dim() < 2:
        raise ValueError("read needs an example batch: a tensor with a batch dimension first")
    keep = tuple(keep)
    if not all(isinstance(k, type) and issubclass(k, nn.Module) for k in keep):
        raise ValueError(f"keep must be nn.Module classes, got {keep!r}")
    rec = _Recorder(model, example, keep)
    try:
        with rec, torch.no_grad():
            model(example)
    finally:
        for h in rec.hooks:
            h.remove()
    stages, new = [], {}  # collapse runs of one kept class, each reading the one before
    for i, s in enumerate(rec.stages):
        s.inputs = [new[j] for j in s.inputs]
        p = stages[-1] if stages else None
        if (p is not None and keep and isinstance(s.module, keep) and type(s.module) is type(p.module)
                and s.inputs == [len(stages) - 1]):
            p.members, p.shape = (p.members or [p.name]) + [s.name], s.shape
        else:
            stages.append(s)
        new[i] = len(stages) - 1
    return stages


def _skip_source(stages: list[Stage], i: int) -> int | None:
    """The stage a residual ``add`` at ``i`` takes its skip from (its other input is stage i-1)."""
    s = stages[i]
    if s.kind == "add" and len(s.inputs) == 2 and i - 1 in s.inputs and min(s.inputs) < i - 1:
        return min(s.inputs)
    return None


def skips_hold(block: nn.Module, example: torch.Tensor, keep: tuple = ()) -> bool:
    """True if ``block`` has residual adds and, with the output of the last module of each
    residual branch set to zero, returns its input unchanged (every branch is wrapped by a skip)."""
    stages = read(block, example, keep)
    last = set()
    for i in range(len(stages)):
        if _skip_source(stages, i) is not None:
            j = i - 1
            while stages[j].module is None and j > 0:  # back over transposes and scales to the module
                j -= 1
            last.add(stages[j].module)
    if not last or None in last:
        return False
    hooks = [m.register_forward_hook(lambda m, a, out: torch.zeros_like(out)) for m in last]
    try:
        with torch.no_grad():
            return torch.equal(block(example), example)
    finally:
        for h in hooks:
            h.remove()


def label(s: Stage) -> str:
    """Default box text: the module path and what the module computes, or the operation."""
    m, t = s.module, s.name
    if s.members:
        return f"{len(s.members)} × {s.kind}\n({s.members[0]} … {s.members[-1]})"
    if isinstance(m, nn.Linear):
        return f"{t}: Linear {m.in_features} → {m.out_features}"
    if isinstance(m, nn.Conv2d):
        k = m.kernel_size
        return f"{t}: Conv2d {m.in_channels} → {m.out_channels}, {k[0]}×{k[1]} / {m.stride[0]}"
    if hasattr(m, "proj") and isinstance(m.proj, nn.Conv2d):  # a patch embedding
        c = m.proj
        return f"{t}: {s.kind}\nConv2d {c.in_channels} → {c.out_channels}, {c.kernel_size[0]}×{c.kernel_size[1]} / {c.stride[0]}"
    if hasattr(m, "fc1") and hasattr(m, "fc2"):
        return f"{t}: MLP {m.fc1.in_features} → {m.fc1.out_features} → {m.fc2.out_features}"
    if s.kind == "Affine":
        return f"{t}: Aff   α, β ∈ ℝ^{m.alpha.numel()}"
    if m is not None and "Norm" in s.kind:
        n = getattr(m, "num_features", None) or getattr(m, "normalized_shape", [None])[0]
        return f"{t}: {s.kind} ({n})"
    if s.param:  # an operation with a parameter of the model: LayerScale, a position embedding
        return f"{dict(mul='×', add='+').get(s.kind, s.kind)} {s.param}"
    return f"{t}: {s.kind}" if m is not None else "+" if _is_sum(s) else t


def _is_sum(s: Stage) -> bool:  # drawn as a circle
    return s.kind == "add" and not s.param


def _shape_text(shape: tuple, symbols: dict | None = None, sep: str = "   ") -> str:
    numbers = " × ".join(map(str, shape))
    names = " × ".join(symbols.get(n, str(n)) for n in shape) if symbols else numbers
    return numbers if names == numbers else f"{numbers}{sep}({names})"


def _lookup(what, mapping, panels, default):
    """{panel: [text per stage]} from ``mapping``, keyed by stage name or kind, or by (panel
    title, name or kind) for one panel only; a key that names no stage is refused."""
    keys = {k for p, st in panels.items() for s in st for k in (s.name, s.kind, (p, s.name), (p, s.kind))}
    unknown = sorted(set(mapping) - keys, key=str)
    if unknown:
        raise ValueError(f"{what} name no stage of the diagram: {unknown}; the stages are "
                         f"{sorted({k for k in keys if isinstance(k, str)})}")
    return {p: [next((mapping[k] for k in ((p, s.name), (p, s.kind), s.name, s.kind) if k in mapping), default(s))
                for s in st] for p, st in panels.items()}


def _texts(panels, labels):
    """Box texts; "{}" in a label stands for the default text."""
    return {p: [t.replace("{}", label(s)) for s, t in zip(panels[p], ts)]
            for p, ts in _lookup("labels", labels, panels, lambda s: "{}").items()}


def table(panels: dict[str, list[Stage]], labels: dict | None = None) -> pd.DataFrame:
    """One row per stage: panel, stage, kind, operation (the box text), input and output shapes."""
    texts = _texts(_check_panels(panels), labels or {})
    return pd.DataFrame([dict(panel=p, stage=s.name, kind=s.kind, operation=t.replace("\n", " "),
                              input=" × ".join(map(str, s.shape_in)), output=" × ".join(map(str, s.shape)))
                         for p, st in panels.items() for s, t in zip(st, texts[p])])


def _check_panels(panels):
    if not isinstance(panels, dict) or not panels or not all(
            isinstance(st, list) and st and all(isinstance(s, Stage) for s in st) for st in panels.values()):
        raise ValueError("panels must be a non-empty dict {title: stages from read()}, every list non-empty")
    return panels


def _size(text, fs):
    """(width, height) in inches of ``text`` at ``fs`` points, as matplotlib will set it."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath
    lines, font, measure = text.split("\n"), FontProperties(size=fs), TextToPath().get_text_width_height_descent
    return max(measure(ln, font, ismath=False)[0] for ln in lines) / 72, len(lines) * fs * 1.3 / 72


def _colour(s):
    if s.members:
        return "#e9dcf5"
    if s.kind == "input":
        return "white"
    if "Norm" in s.kind or s.kind == "Affine":
        return "#fde2c4"
    if isinstance(s.module, (nn.Linear, nn.Conv2d)) or hasattr(s.module, "fc1"):
        return "#cfe3f7"
    if hasattr(s.module, "proj"):
        return "#d8f0d2"
    return "#eeeeee" if s.module is not None else "#f7f7f7"


def _layout(st, texts, notes, symbols, down):
    """Sizes (inches) of one chain before it is spread: boxes, the gap after each, skip levels."""
    sizes = [_size(t, FS) for t in texts]
    shapes = [_shape_text(s.shape, symbols, "   " if down else "\n") for s in st]
    thick = max(h for _, h in sizes) + 0.2
    boxes = [(2 * R, 2 * R) if _is_sum(s) else (max(w for w, _ in sizes) + 0.3, h + 0.16) if down else (w + 0.3, thick)
             for (w, h), s in zip(sizes, st)]
    gaps = [0.36 if down else _size(sh, FS_SMALL)[0] + 0.3 for sh in shapes]  # the last: the output arrow
    skips = []  # (source, add, level): a skip spanning another goes round it
    for i in range(len(st)):
        if (a := _skip_source(st, i)) is not None:
            skips.append((a, i, 1 + max([lv for s, d, lv in skips if s < i and a < d], default=0)))
    note_sizes = [_size(n, FS_SMALL) for n in notes]
    return dict(st=st, texts=texts, notes=notes, boxes=boxes, gaps=gaps, shapes=shapes, skips=skips,
                across=max(b[0] if down else b[1] for b in boxes),
                side=0.3 + 0.22 * max([lv for *_, lv in skips], default=0) if skips else 0.25,
                tail=0.25 + max([w for w, _ in note_sizes] + [_size(sh, FS_SMALL)[0] + 0.3 for sh in shapes] if down
                                else [h for _, h in note_sizes]),
                span=sum(b[1] if down else b[0] for b in boxes) + sum(gaps))


def draw(panels: dict[str, list[Stage]], *, labels: dict | None = None, notes: dict | None = None,
         symbols: dict | None = None, direction: str = "down", zoom: tuple | None = None,
         title: str | None = None, fig=None):
    """Each panel a chain of boxes, one per stage, flowing ``direction`` ("down": panels side by
    side; "right": panels stacked), spread to the longest panel. Arrows carry the output shape
    (``symbols``: {size: name}); a residual add is a circle fed by a red skip line; ``labels``
    and ``notes`` (beside a box) are keyed by stage name or kind; ``zoom=(stage name, panel
    title)`` joins a box to the panel that details it. Into ``fig`` (a Figure or SubFigure,
    scaled down to fit) or a new figure sized to the content; returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import ConnectionPatch

    check_choice("direction", direction, ("down", "right"))
    texts = _texts(_check_panels(panels), labels or {})
    notes, symbols = _lookup("notes", notes or {}, panels, lambda s: ""), symbols or {}
    names = {s.name: p for p, st in panels.items() for s in st}
    if zoom is not None and (not isinstance(zoom, tuple) or len(zoom) != 2 or zoom[0] not in names
                             or zoom[1] not in panels or names[zoom[0]] == zoom[1]):
        raise ValueError(f"zoom must be (stage name, title of another panel), got {zoom!r}")
    down = direction == "down"
    lay = {p: _layout(st, texts[p], notes[p], symbols, down) for p, st in panels.items()}
    span = max(L["span"] for L in lay.values())
    dims = {}  # panel (width, height) in inches, every chain spread to the longest
    for L in lay.values():
        inner = max(1, len(L["gaps"]) - 1)  # the arrows between boxes stretch, the output arrow does not
        L["gaps"] = [g + (span - L["span"]) / inner * (i < inner) for i, g in enumerate(L["gaps"])]
    for p, L in lay.items():
        cross = L["side"] + L["across"] + L["tail"]
        dims[p] = (cross, TITLE + span + 0.25) if down else (span + 0.4, TITLE + cross)
    W = (sum if down else max)(w for w, _ in dims.values())
    H = (max if down else sum)(h for _, h in dims.values())
    head = 0.55 if title else 0.0
    if fig is None:
        fig = plt.figure(figsize=(W, H + head))
    setattr(fig.get_figure(root=True), NATURAL_SIZE, True)   # text sized with its boxes, shown unscaled
    fw, fh = fig.bbox.width / fig.dpi, fig.bbox.height / fig.dpi
    k = min(1.0, fw / W, (fh - head) / H)  # scale: fonts and lines shrink with the boxes
    if title:
        fig.suptitle(title, fontsize=12 * max(k, 0.8))
    axes, done, centres = {}, 0.0, {}
    for p, (w, h) in dims.items():
        x0, y0 = (fw - W * k) / 2, (fh - head - H * k) / 2
        x0, y0 = (x0 + done * k, y0 + (H - h) * k) if down else (x0, y0 + (H - done - h) * k)
        done += w if down else h
        axes[p] = fig.add_axes([x0 / fw, y0 / fh, w * k / fw, h * k / fh])
        axes[p].set(xlim=(0, w), ylim=(-h, 0))  # data units: inches at scale 1, y downwards
        axes[p].axis("off")
        centres[p] = _draw_panel(axes[p], p, lay[p], (w, h), down, k)
    if zoom is not None:  # dashed lines from the box to the corners of the panel that details it
        src = names[zoom[0]]
        (x, y), (bw, bh) = centres[src][zoom[0]]
        w, h = dims[zoom[1]]
        a = [(x + bw / 2, y)] * 2 if down else [(x - bw / 2, y - bh / 2), (x + bw / 2, y - bh / 2)]
        b = [(0.08, -0.08), (0.08, -h + 0.08)] if down else [(0.08, -0.08), (w - 0.08, -0.08)]
        for ea, eb in zip(a, b):
            fig.add_artist(ConnectionPatch(ea, eb, "data", "data", axesA=axes[src], axesB=axes[zoom[1]],
                                           ls="--", color="#888", lw=0.8 * k))
    return fig


def _draw_panel(ax, title, L, size, down, k):
    """One chain into ``ax`` (inches, y downwards); returns {stage name: (centre, box size)}."""
    from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

    (w, h), st, lw = size, L["st"], k
    arrow = dict(arrowstyle="-|>", mutation_scale=10 * k, zorder=1)
    ax.add_patch(FancyBboxPatch((0.06, -h + 0.06), w - 0.12, h - 0.12, boxstyle="round,pad=0,rounding_size=0.1",
                                fc="#fbfbfb", ec="#cccccc", lw=lw, zorder=0))
    ax.text(0.2, -0.25, title, fontsize=10 * k, weight="bold", va="center")
    c = L["side"] + L["across"] / 2 if down else -(TITLE + L["side"] + L["across"] / 2)  # the flow's axis
    xy, t = [], TITLE + 0.1 if down else 0.2
    for (bw, bh), g in zip(L["boxes"], L["gaps"]):
        along = bh if down else bw
        xy.append((c, -(t + along / 2)) if down else (t + along / 2, c))
        t += along + g

    def edge(i, end):  # where the flow leaves (end=1) or enters (end=-1) box i
        (x, y), (bw, bh) = xy[i], L["boxes"][i]
        return (x, y - end * bh / 2) if down else (x + end * bw / 2, y)

    for i, (s, text, (bw, bh), (x, y)) in enumerate(zip(st, L["texts"], L["boxes"], xy)):
        gid = f"stage:{title}:{s.name}"
        if _is_sum(s):
            ax.add_patch(Circle((x, y), R, fc="white", ec="k", lw=1.1 * lw, zorder=3, gid=gid))
            ax.text(x, y, "+", ha="center", va="center", fontsize=12 * k, zorder=4)
        else:
            for d in (2, 1) if s.members else ():  # a stack behind: the repeated layers
                ax.add_patch(FancyBboxPatch((x - bw / 2 + 0.06 * d, y - bh / 2 + 0.06 * d), bw, bh,
                                            boxstyle="round,pad=0.02", fc=_colour(s), ec="k", lw=0.6 * lw, zorder=1.5))
            ax.add_patch(FancyBboxPatch((x - bw / 2, y - bh / 2), bw, bh, boxstyle="round,pad=0.02",
                                        fc=_colour(s), ec="k", lw=lw, zorder=2, gid=gid))
            ax.text(x, y, text, ha="center", va="center", fontsize=FS * k, zorder=3)
        if L["notes"][i]:
            ax.text(*((x + bw / 2 + 0.08, y) if down else (x, y - bh / 2 - 0.06)), L["notes"][i], color=NOTE,
                    fontsize=FS_SMALL * k, ha="left" if down else "center", va="center" if down else "top")
        a = edge(i, 1)
        last = i + 1 == len(st)
        b = edge(i + 1, -1) if not last else (x, a[1] - 0.8 * L["gaps"][i]) if down else (a[0] + 0.8 * L["gaps"][i], y)
        ax.add_patch(FancyArrowPatch(a, b, lw=lw, **arrow))
        ax.text(*((x + 0.07, (a[1] + b[1]) / 2) if down else ((a[0] + b[0]) / 2, y + 0.05)),
                L["shapes"][i] + ("   output" if last and down else ""), fontsize=FS_SMALL * k, color="#444",
                ha="left" if down else "center", va="center" if down else "bottom", zorder=5)
    for src, dst, level in L["skips"]:  # leave src's output, go round, into the circle
        a, (x, y) = edge(src, 1), xy[dst]
        style = dict(color=SKIP, lw=1.3 * lw)
        if down:
            xl, ys = c - L["across"] / 2 - 0.1 - 0.22 * level, a[1] - 0.08
            ax.plot([c, xl, xl], [ys, ys, y], zorder=1, **style)
            ax.add_patch(FancyArrowPatch((xl, y), (x - R, y), **arrow, **style))
            ax.text(xl - 0.04, (ys + y) / 2, "skip-connection", rotation=90, fontsize=FS_SMALL * k, color=SKIP,
                    ha="right", va="center")
        else:
            top, xs = c + L["across"] / 2 + 0.1 + 0.22 * level, a[0] + 0.08
            ax.plot([xs, xs, x], [c, top, top], zorder=1, **style)
            ax.add_patch(FancyArrowPatch((x, top), (x, c + R), **arrow, **style))
            ax.text((xs + x) / 2, top + 0.03, "skip-connection", fontsize=FS_SMALL * k, color=SKIP, ha="center",
                    va="bottom")
    return {s.name: (xy[i], L["boxes"][i]) for i, s in enumerate(st)}
