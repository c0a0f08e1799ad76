"""Fixtures shared by the notebook tests."""
import os

import pytest
import timm
import torch


@pytest.fixture(scope="session", autouse=True)
def _worker_cache(tmp_path_factory):
    """Under pytest-xdist each worker keeps its checkpoints and data in its own cache, so two workers
    never resume each other's half-trained smoke run (a fresh cache, as on CI's fresh machine), and
    takes its share of the cores: more threads than cores made torch's runs many times slower here."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["VITMLP_CACHE"] = str(tmp_path_factory.mktemp("vitmlp-cache"))
        # torch's count, as experiment.worker_pool splits it: respects a user's OMP_NUM_THREADS
        threads = max(1, torch.get_num_threads() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
        os.environ["OMP_NUM_THREADS"] = str(threads)   # and the kernels and processes a test starts
        torch.set_num_threads(threads)


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Results of notebooks run by a test go to a temporary folder, never to the book's."""
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("VITMLP_PROGRESS", "0")
    # smoke runs are tiny: one thread each avoids waiting on a core that other jobs hold
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path


def save_random_checkpoints(folder, names) -> dict:
    """{timm name: file} of randomly initialised timm models (seed 1, 2, ... in order): stand-ins
    for official pretrained weights, which cannot be downloaded here."""
    out = {}
    for seed, name in enumerate(names, 1):
        torch.manual_seed(seed)
        out[name] = str(folder / f"{name}.pth")
        torch.save(timm.create_model(name).state_dict(), out[name])
    return out
