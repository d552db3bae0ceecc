"""The seam is held on imports, not on words (DESIGN "Rules"): every import of every module is walked, including
imports inside functions and ``importlib.import_module`` / ``__import__`` calls with a constant name.

- nothing under ``llava/`` imports ``braco_patch``;
- Braco's core units import nothing but the standard library, torch, numpy, entmax and each other;
- a ``braco_patch`` module outside the declared seam imports no ``llava``;
- ``import braco_patch`` imports neither transformers nor peft, and ``braco --help`` answers in under 2 s.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Braco's core units: one paper step each, plus the coder and its config (importable without llava or transformers).
CORE_UNITS = ("basis", "embedding", "coordinates", "residual", "schedule", "coder", "config")
CORE_ALLOWED = {"torch", "numpy", "entmax"}

#: The braco_patch modules that connect Braco to llava, and why.
SEAM = {
    "braco_patch/llava_plugin.py": "Braco's plugin registration (projector types, settings, callbacks, needs, cost)",
    "braco_patch/view.py": "Braco's demo view, drawn with llava's panel helpers",
    "braco_patch/baselines/llava_plugin.py": "the baselines' plugin registrations",
    "braco_patch/baselines/view.py": "the baselines' demo views",
    "braco_patch/baselines/module_flops.py": "the baselines' cost models, counted in llava's FLOP convention",
    "braco_patch/cost/": "the `braco cost` command: Braco's tables on llava's pipeline cost engine",
    "braco_patch/diagnostics/tower.py": "`braco diagnose` / `calibrate` load a tower through llava's tower registry",
    "braco_patch/diagnostics/commands.py": "`braco diagnose` / `calibrate` check --out and --device with llava's rules",
    "braco_patch/diagnostics/report.py": "the diagnostics' files are written through llava's atomic writers",
    "braco_patch/diagnostics/data.py": "the diagnostics open images by llava's one image rule (the pixel bound)",
    "braco_patch/argtypes.py": "the braco commands' numeric flags follow llava's one numeric rule",
    "braco_patch/demo.py": "`braco demo` writes its folder through llava's output guard",
    "braco_patch/export.py": "`braco export --official` finds the tower by llava's rule and writes through its output guard",
}


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, anywhere in it (relative imports resolved)."""
    inside = path.is_relative_to(ROOT)
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts) if inside else path.stem
    if path.name != "__init__.py" and inside:
        package = package.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _top(name: str) -> str:
    return name.split(".")[0]


def _in_seam(path: Path) -> bool:
    relative = path.relative_to(ROOT).as_posix()
    return any(relative == entry or (entry.endswith("/") and relative.startswith(entry)) for entry in SEAM)


def test_llava_never_imports_braco_patch():
    offending = {p.relative_to(ROOT).as_posix(): sorted(n for n in imported_modules(p) if _top(n) == "braco_patch")
                 for p in _modules("llava")}
    assert {k: v for k, v in offending.items() if v} == {}


def test_braco_core_units_import_only_torch_numpy_entmax():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for unit in CORE_UNITS:
        path = ROOT / "braco_patch" / f"{unit}.py"
        for name in imported_modules(path):
            top = _top(name)
            if top in stdlib or top in CORE_ALLOWED:
                continue
            assert top == "braco_patch" and name.split(".")[1] in CORE_UNITS, f"braco_patch/{unit}.py imports {name}"


def test_only_the_seam_imports_llava():
    offending = {p.relative_to(ROOT).as_posix(): sorted(n for n in imported_modules(p) if _top(n) == "llava")
                 for p in _modules("braco_patch") if not _in_seam(p)}
    assert {k: v for k, v in offending.items() if v} == {}


def test_every_seam_entry_exists_and_imports_llava():
    """The seam list stays short and true: an entry that no longer touches llava must be removed."""
    for entry, reason in SEAM.items():
        paths = _modules(entry) if entry.endswith("/") else [ROOT / entry]
        assert paths and all(p.is_file() for p in paths), f"stale seam entry ({reason}): {entry}"
        assert any(_top(n) == "llava" for p in paths for n in imported_modules(p)), f"{entry} no longer imports llava ({reason})"


def test_the_walker_sees_lazy_and_importlib_imports(tmp_path: Path):
    module = tmp_path / "probe.py"
    module.write_text(
        "import importlib\n\ndef f():\n    from braco_patch import coder\n    return importlib.import_module('braco_patch.view')\n"
        "\ndef g():\n    return __import__('braco_patch.cost')\n",
        encoding="utf-8",
    )
    assert {"braco_patch", "braco_patch.coder", "braco_patch.view", "braco_patch.cost"} <= imported_modules(module)


@pytest.mark.parametrize("code, absent", [
    ("import braco_patch", ("transformers", "peft", "llava", "torch")),
    ("import braco_patch.coder, braco_patch.config, braco_patch.schedule", ("transformers", "peft", "llava")),
])
def test_importing_braco_patch_stays_light(code: str, absent: tuple[str, ...]):
    probe = f"{code}\nimport sys\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & {set(absent)!r}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_braco_help_answers_in_under_two_seconds():
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "braco_patch.cli", "--help"], capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - start
    assert out.returncode == 0 and "cost" in out.stdout
    assert elapsed < 2.0, f"braco --help took {elapsed:.2f} s"
