"""Fixtures shared by the notebook tests."""
import pytest
import timm
import torch


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
