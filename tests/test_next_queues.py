"""scripts/next_queues.py: the planning cost of a queue, as the chapter pages' still-to-train column shows it."""
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))

from next_queues import MACS_PER_S, _macs, cpu_hours  # noqa: E402

from vitmlp.train import TrainConfig  # noqa: E402


def test_a_run_costs_its_forward_macs_times_its_images_and_sam_twice_that():
    opts = {"depth_mult": 0.5, "img_size": 32, "patch_size": 4, "width_mult": 0.125}
    plain = TrainConfig(model="vit_S", model_options=opts, img_size=32, steps=10, batch_size=128)
    macs = _macs("vit_S", repr(sorted(opts.items())), 32)
    assert cpu_hours([plain]) == macs * 10 * 128 / MACS_PER_S["vit"] / 3600
    sam = dataclasses.replace(plain, sam_rho=0.05)   # a second forward-backward at the perturbed weights
    assert cpu_hours([sam]) == 2 * cpu_hours([plain])
    assert cpu_hours([plain, sam]) == 3 * cpu_hours([plain])
