"""Every model variant of the five papers, reachable through :func:`create_model`."""
from .registry import check_choice, create_model, list_models, register  # noqa: F401
from . import vit, resmlp, mixer  # noqa: F401,E402  (registers the families)
