"""The install files agree with each other: one set of pins for pip and conda."""
import re
import tomllib

from vitmlp.results import REPO


def test_environment_yml_installs_the_lock_and_the_package():
    env = (REPO / "environment.yml").read_text()
    assert "- -r requirements.lock" in env and "- -e ." in env
    py = re.search(r"python=(\d+\.\d+)", env).group(1)
    req = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert tuple(map(int, py.split("."))) >= tuple(map(int, req.lstrip(">=").split(".")))


def test_lock_pins_every_dependency_exactly():
    lock = dict(l.split("==") for l in (REPO / "requirements.lock").read_text().split()
                if "==" in l)
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.split(r"[<>=!\[ ]", d)[0].lower() for d in deps]
    missing = [n for n in names if n not in {k.lower() for k in lock}]
    assert not missing, f"not pinned in requirements.lock: {missing}"
    assert "jupyter-book" in lock and lock["jupyter-book"].startswith("1.")
