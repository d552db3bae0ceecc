"""Packaging: the editable install goes through PEP 517/660 and needs no network (issue 29 item 4).

setuptools >= 80 runs ``setup.py develop`` for a project without ``pyproject.toml``, and that command calls pip again
under build isolation, which downloads setuptools: the GPU kit's offline install failed so (pip before 25.1 still
takes that path for a project without ``pyproject.toml``). This test installs a copy of the project into a fresh
virtualenv with the interpreter's own pip (``ensurepip``: 23.2 for Python 3.11 and 3.12), the setuptools and wheel
of the running environment (setuptools 84 in ``make install``'s) and no package index, as ``scripts/gpu/check.sh``
does on a machine with no network.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT_FILES = ("setup.py", "pyproject.toml", "README.md", "llava", "braco_patch")


#: The build tools the GPU image has, copied from the running environment (all pure Python): with ``wheel`` present,
#: pip before 25.1 runs ``setup.py develop`` for a project without ``pyproject.toml``.
BUILD_TOOLS = ("setuptools", "wheel", "packaging")


def _copy_distribution(name: str, site: Path) -> None:
    """Copy the installed files of distribution ``name`` into the site-packages folder ``site``."""
    distribution = importlib.metadata.distribution(name)
    root = Path(str(distribution.locate_file(""))).resolve()
    for top in sorted({Path(str(f)).parts[0] for f in distribution.files or ()} - {".."}):  # not its console scripts
        path = root / top
        if path.is_dir():
            shutil.copytree(path, site / top, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        elif path.is_file() and path.suffix != ".pyc":
            shutil.copy2(path, site / top)


def test_editable_install_needs_no_network(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in PROJECT_FILES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, project / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif (REPO / name).is_file():
            shutil.copy2(REPO / name, project / name)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)  # the interpreter's bundled pip: no network
    python = env_dir / "bin" / "python"
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    pip = [str(python), "-m", "pip"]
    subprocess.run([*pip, "uninstall", "-q", "-y", "setuptools"], capture_output=True, env=env, check=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name in BUILD_TOOLS:
        _copy_distribution(name, site)
    command = [*pip, "install", "--no-index", "--no-deps", "--no-build-isolation", "-e", str(project)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    listing = ("from importlib.metadata import entry_points; "
               "print(sorted(e.value for e in entry_points(group='llava.projectors'))); "
               "print([e.value for e in entry_points(group='console_scripts', name='braco')])")
    shown = subprocess.run([str(python), "-c", listing], capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert shown.stdout.splitlines() == [
        "['braco_patch.baselines.llava_plugin', 'braco_patch.llava_plugin']", "['braco_patch.cli:main']"]
    assert (env_dir / "bin" / "braco").is_file()
    assert (site / f"braco_llava-{importlib.metadata.version('braco-llava')}.dist-info").is_dir()
