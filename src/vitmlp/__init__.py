"""vitmlp: models, data, training and measurements for the ViT / all-MLP reproducibility book."""
__version__ = "0.1.0"
