"""vitmlp: models, data, training and measurements for the ViT / all-MLP reproducibility book."""
__version__ = "0.1.0"

import sys as _sys

if "IPython" in _sys.modules:   # a notebook: every figure it shows is made legible at the page's size
    from .plots import show_figures_legibly as _show_figures_legibly
    _show_figures_legibly()
