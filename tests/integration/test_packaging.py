"""APE installed from a plain wheel, used from a user's project whose own modules are
called ``tasks``, ``schemas`` and ``flows``: nothing collides, and plugins load by path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ape.config import load_config
from ape.tasks.plugins.loader import load_object
from ape.tasks.setup.model import load_data_model
from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.slow

USER_TASKS = '''"""The user's own tasks.py (as Celery or invoke would have it), holding the checker."""
from ape import Failed, Passed

LOADED_FROM = __file__


def check_answer(item, solution):
    return Passed() if solution == item.answer else Failed(f"expected {item.answer}")
'''

USER_SCHEMA = """from pydantic import BaseModel

LOADED_FROM = __file__


class Problem(BaseModel):
    id: str
    question: str
    answer: int
    category: str
"""

USER_FLOW = '''"""The user's own flows/benchmark.py (a Prefect project layout)."""
LOADED_FROM = __file__


def benchmark():
    raise RuntimeError("the user's flow, not APE's")
'''


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """APE built as a plain (non-editable) wheel from this source tree."""
    dist = tmp_path_factory.mktemp("dist")
    # build from a clean copy, so no stale build/ folder of the checkout leaks into the wheel
    source = tmp_path_factory.mktemp("source") / "ape"
    shutil.copytree(
        REPO_ROOT,
        source,
        ignore=shutil.ignore_patterns(".git", "build", "output", "*.egg-info", "__pycache__", ".venv", ".pytest_cache"),
    )
    checked(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        cwd=dist,
    )
    return next(dist.glob("ape_bench-*.whl"))


def checked(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``command``; on failure the assertion shows its output, not just the exit status."""
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    return done


def dependency_folders() -> list[str]:
    """The site-packages folders this interpreter imports APE's dependencies from (a venv's
    own, and its base's when the venv sees those), never a source checkout."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]


@pytest.fixture(scope="module")
def wheel_venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding APE from the wheel, with the dependencies of this interpreter.

    A ``.pth`` file in the new venv lists this interpreter's site-packages folders (after
    the venv's own, so APE comes from the wheel): ``--system-site-packages`` would see the
    base Python's packages only, which lack the dependencies when they live in a venv."""
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    checked([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    own = checked([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    (Path(own) / "ape_test_dependencies.pth").write_text("\n".join(dependency_folders()) + "\n", encoding="utf-8")
    checked([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])
    return venv


def user_project(folder: Path) -> Path:
    """A project with its own tasks.py, schemas/ and flows/, and a copy of the arithmetic
    example whose plugins are those modules."""
    folder.mkdir(parents=True)
    (folder / "tasks.py").write_text(USER_TASKS)
    (folder / "schemas").mkdir()
    (folder / "schemas" / "__init__.py").write_text("")
    (folder / "schemas" / "check.py").write_text(USER_SCHEMA)
    (folder / "flows").mkdir()
    (folder / "flows" / "__init__.py").write_text("")
    (folder / "flows" / "benchmark.py").write_text(USER_FLOW)
    example = REPO_ROOT / "examples" / "arithmetic"
    shutil.copy(example / "data.jsonl", folder / "data.jsonl")
    config = (example / "config.toml").read_text()
    config = config.replace('schema = "arithmetic:Problem"', 'schema = "schemas.check:Problem"')
    config = config.replace(
        'implementation = "exact_match"\nargs = { field = "answer" }', 'implementation = "tasks:check_answer"'
    )
    config = config.replace("runs_per_data = 3", "runs_per_data = 1")
    assert "tasks:check_answer" in config and "schemas.check:Problem" in config
    (folder / "config.toml").write_text(config)
    return folder


def ape(venv: Path, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{venv / 'bin'}:{os.environ['PATH']}", PYTHONPATH="")
    return subprocess.run(
        [str(venv / "bin" / "ape"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_wheel_installs_only_the_ape_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"ape"}, tops
    for data in (
        "ape/examples/demo/tasks.jsonl",
        "ape/examples/arithmetic/config.toml",
        "ape/deployments/prefect.yaml",
        "ape/catalogue/catalogue.toml",  # `ape benchmarks` and `ape init` from a plain install
        "ape/catalogue/configs/gsm8k.toml",
        "ape/flows/benchmark.py",
        "ape/tasks/solving/solve.py",
        "ape/schemas/config.py",
    ):
        assert data in names, data


def test_a_user_project_with_tasks_schemas_and_flows(wheel_venv, tmp_path, prefect_server):
    project = user_project(tmp_path / "project")
    python = wheel_venv / "bin" / "python"

    # APE comes from the wheel, not from this source tree
    where = checked(
        [
            str(python),
            "-c",
            "import ape, ape.tasks.solving.solve as s, langchain_core; print(ape.__file__, s.__file__)",
        ],
        cwd=tmp_path,
    ).stdout
    assert str(wheel_venv) in where and str(REPO_ROOT) not in where

    # nothing but `ape` at the top level: a bare `import tasks` finds nothing
    bare = subprocess.run([str(python), "-c", "import tasks"], cwd=tmp_path, capture_output=True, text=True)
    assert bare.returncode != 0 and "No module named 'tasks'" in bare.stderr

    validated = ape(wheel_venv, project, "validate", "config.toml")
    assert validated.returncode == 0, validated.stderr
    assert "30 items" in validated.stdout

    ran = ape(wheel_venv, project, "run", "config.toml", "--no-progress", "--no-server")
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads((project / "output" / "report.json").read_text())
    assert {row["model_id"] for row in report["leaderboard"]} == {"mock-careful", "mock-sloppy"}
    assert report["summary"]["tasks"] == 30
    # the user's checker ran: its reason text is in the transcripts
    sessions = (project / "output" / "mock-sloppy" / "sessions.jsonl").read_text()
    assert "expected " in sessions

    demo = ape(wheel_venv, project, "demo", "--out", str(tmp_path / "demo"))
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert (tmp_path / "demo" / "report.json").is_file()

    served = ape(wheel_venv, project, "serve", "--help")
    assert served.returncode == 0 and "--cron" in served.stdout

    # the user's own flows/ did not shadow APE's, and the sample yaml ships with the wheel
    entry = subprocess.run(
        [
            str(python),
            "-c",
            "from prefect.flows import load_flow_from_entrypoint as f;"
            "print(f('ape.flows.benchmark:benchmark').name);"
            "import importlib.resources as r; print((r.files('ape.deployments') / 'prefect.yaml').is_file())",
        ],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert entry.returncode == 0, entry.stderr
    assert entry.stdout.split() == ["benchmark", "True"]


def two_configs(tmp_path: Path) -> tuple[Path, Path]:
    paths = []
    for name, answer in (("one", 1), ("two", 2)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "tasks.py").write_text(
            f"from pydantic import BaseModel\n\nANSWER = {answer}\n\n"
            "class Item(BaseModel):\n    id: str\n    question: str\n"
        )
        (folder / "data.jsonl").write_text('{"id": "a", "question": "q"}\n')
        (folder / "config.toml").write_text(
            '[data]\nfile = "data.jsonl"\nschema = "tasks:Item"\n[prompt]\ntemplate = "{{ question }}"\n'
            '[model]\nprovider = "mock"\n[adapter]\nimplementation = "raw"\n'
            '[checker]\nimplementation = "tasks:ANSWER"\n'
        )
        paths.append(folder / "config.toml")
    return paths[0], paths[1]


def test_two_configs_with_same_named_plugins_each_get_their_own(tmp_path):
    first, second = (load_config(p) for p in two_configs(tmp_path))
    one = load_object("tasks:ANSWER", base_dir=first.base_dir)
    two = load_object("tasks:ANSWER", base_dir=second.base_dir)
    assert (one, two) == (1, 2)
    model_one, model_two = load_data_model(first), load_data_model(second)
    assert model_one is not model_two
    assert model_one.__module__ != model_two.__module__
    assert model_one.__module__.startswith("_ape_plugins_")
    # the private name is deterministic: the same folder gives the same module
    assert load_data_model(load_config(first.config_file)) is model_one
    # and sys.path was not touched
    assert str(first.base_dir) not in sys.path and str(second.base_dir) not in sys.path
    # APE's own packages are not shadowed by the user's `tasks` module
    import ape.tasks.solving.solve

    assert Path(ape.tasks.solving.solve.__file__).parent.parent.name == "tasks"
    assert "tasks" not in sys.modules or not hasattr(sys.modules["tasks"], "ANSWER")
