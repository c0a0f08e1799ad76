"""The book's one trainer: ``train(config) -> record`` (see :mod:`vitmlp.train.trainer`)."""
from .batches import Batches, build_data, epoch_batches  # noqa: F401
from .config import TrainConfig  # noqa: F401
from .sam import SAM  # noqa: F401
from .trainer import build_model, load_weights, train  # noqa: F401
