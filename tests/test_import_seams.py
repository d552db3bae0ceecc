"""The seams and layers are held on imports, not on words (DESIGN "Rules"): every import of every module is walked,
including imports inside functions and ``importlib.import_module`` / ``__import__`` calls with a constant name.

- nothing under ``llava/`` imports ``braco_patch``;
- Braco's core units import nothing but the standard library, torch, numpy, entmax and each other;
- a ``braco_patch`` module outside the declared seam imports no ``llava``; a baseline's method file imports from
  llava only the plugin API (and, inside its view, the panel helpers);
- ``import braco_patch`` imports neither transformers nor peft, and ``braco --help`` answers in under 2 s;
- **the import graph** of ``llava/`` and ``braco_patch/`` (module-level and function-level imports; imports under
  ``if TYPE_CHECKING:`` never run and are left out, and so is the implicit import of a module's parent packages)
  has no cycle;
- **the layers** of :data:`LAYERS` (listed in :mod:`llava.plugin_api`'s docstring): a unit of llava imports only units
  of a lower layer, or of its own layer in the shared utilities; so ``llava.model`` never imports ``llava.cost``, and
  ``llava.eval`` and ``llava.serve`` never import each other;
- the plugin API (the package ``llava/plugin_api/``, every module of it) imports only the standard library and its
  own modules when it runs (torch for type checkers), and importing it loads no torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Braco's core units: one paper step each, plus the coder and its config (importable without llava or transformers).
CORE_UNITS = ("basis", "embedding", "coordinates", "residual", "schedule", "coder", "fused", "config")
CORE_ALLOWED = {"torch", "numpy", "entmax"}

#: The braco_patch modules that connect Braco to llava, and why.
SEAM = {
    "braco_patch/llava_plugin.py": "Braco as a method, one file on the plugin API: factory, settings, callbacks, needs, cost, view",
    "braco_patch/baselines/": "the baselines, one file per method on the plugin API (module, FLOPs, factory, cost, view, "
                              "declaration), and the discovery module that registers them",
    "braco_patch/reducers/": "the in-LLM reducers, one file per method on the plugin API (selection, steps, per-layer "
                             "token count, view, declaration), and the discovery module that registers them",
    "braco_patch/cost/": "the `braco cost` command: Braco's tables on llava's pipeline cost engine",
    "braco_patch/diagnostics/tower.py": "`braco diagnose` / `calibrate` load a tower through llava's tower registry",
    "braco_patch/diagnostics/commands.py": "`braco diagnose` / `calibrate` check --out and --device with llava's rules",
    "braco_patch/diagnostics/report.py": "the diagnostics' files are written through llava's atomic writers",
    "braco_patch/diagnostics/data.py": "the diagnostics open images by llava's one image rule (the pixel bound)",
    "braco_patch/argtypes.py": "the braco commands' numeric flags follow llava's one numeric rule",
    "braco_patch/demo.py": "`braco demo` writes its folder through llava's output guard",
    "braco_patch/export.py": "`braco export --official` finds the tower by llava's rule and writes through its output guard",
}


@dataclass(frozen=True)
class Import:
    """One import of a module: the absolute name and where it runs (``module``, ``function`` or ``type-checking``)."""

    name: str
    scope: str


def _package_of(path: Path) -> str:
    inside = path.is_relative_to(ROOT)
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts) if inside else path.stem
    if path.name != "__init__.py" and inside:
        package = package.rsplit(".", 1)[0]
    return package


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _names_of(node: ast.AST, package: str) -> list[str]:
    """The absolute module names one AST node imports (relative imports resolved; ``from m import x``: ``m`` and ``m.x``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        return [module, *(f"{module}.{alias.name}" for alias in node.names)]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    return []


def import_sites(path: Path) -> list[Import]:
    """Every import of ``path`` with its scope: inside a function (or lambda), under ``if TYPE_CHECKING:``, or at
    module level (which includes class bodies and other top-level blocks)."""
    package = _package_of(path)
    found: list[Import] = []

    def visit(node: ast.AST, scope: str) -> None:
        found.extend(Import(name, scope) for name in _names_of(node, package))
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, "type-checking")
            for child in node.orelse:
                visit(child, scope)
            return
        inner = "function" if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and scope == "module" else scope
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "module")
    return found


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, anywhere in it (relative imports resolved)."""
    return {site.name for site in import_sites(path)}


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


# ---------------------------------------------------------------------------------------------- the import graph and its layers

#: Each unit of llava (a top-level module or subpackage) and its layer; a unit imports only units of a lower layer, or
#: of its own layer in the shared utilities (layer 1). A new unit must be given its layer here (and in the plugin API's
#: docstring, which lists them).
LAYERS = {
    "llava.plugin_api": 0,
    **dict.fromkeys(("llava", "llava.constants", "llava.utils", "llava.devices", "llava.outputs", "llava.net", "llava.video",
                     "llava.mm_utils", "llava.conversation", "llava.visual_tokens", "llava.numeric", "llava.pixels",
                     "llava.endpoints", "llava.openai_client", "llava.capture"), 1),
    "llava.model": 2,
    **dict.fromkeys(("llava.cost", "llava.generation"), 3),
    **dict.fromkeys(("llava.eval", "llava.serve", "llava.train", "llava.testing"), 4),
    "llava.quickstart": 5,
}
UTILITIES = 1


def module_files(packages: tuple[str, ...] = ("llava", "braco_patch")) -> dict[str, Path]:
    """``{module name: file}`` of every module of ``packages`` (a package by its ``__init__.py``)."""
    out = {}
    for package in packages:
        for path in _modules(package):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def runtime_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """``{module: modules it imports}`` among ``files``, module-level and function-level imports alike (``TYPE_CHECKING``
    imports never run; a module's parent packages are not counted, as every import runs them)."""

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in files), None)

    graph = {}
    for module, path in files.items():
        targets = {resolve(site.name) for site in import_sites(path) if site.scope != "type-checking"}
        graph[module] = {target for target in targets if target is not None and target != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def unit_of(module: str) -> str:
    """The layer unit of a llava module: ``llava.model.builder`` -> ``llava.model``, ``llava.utils`` -> itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for each import of a llava unit from one that may not import it (see :data:`LAYERS`)."""
    found = []
    for module, targets in sorted(graph.items()):
        if _top(module) != "llava":
            continue
        source = unit_of(module)
        for target in sorted(targets):
            unit = unit_of(target)
            if _top(target) != "llava" or unit == source:
                continue
            low, high = LAYERS[unit], LAYERS[source]
            if low > high or (low == high and low != UTILITIES):
                found.append(f"{module} -> {target} ({source} is layer {high}, {unit} layer {low})")
    return found


def test_the_import_graph_has_no_cycle():
    assert find_cycle(runtime_graph(module_files())) is None


@pytest.mark.parametrize("graph, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": set(), "c": {"c"}}, ["c", "c"]),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),
])
def test_the_cycle_finder(graph, cycle):
    assert find_cycle(graph) == cycle


def test_the_graph_sees_function_imports_and_skips_type_checking(tmp_path: Path):
    module = tmp_path / "probe.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nimport os\nif TYPE_CHECKING:\n    import torch\nelse:\n    import json\n\n"
        "def f():\n    import llava.cost\n\nclass C:\n    import re\n",
        encoding="utf-8",
    )
    scopes = {site.name: site.scope for site in import_sites(module)}
    assert scopes == {"typing": "module", "typing.TYPE_CHECKING": "module", "os": "module", "torch": "type-checking",
                      "json": "module", "llava.cost": "function", "re": "module"}


def test_every_llava_unit_has_a_layer():
    units = {unit_of(module) for module in module_files(("llava",))}
    assert units - set(LAYERS) == set(), "give each new unit its layer in LAYERS (and in llava/plugin_api/__init__.py's docstring)"


def test_llava_imports_only_downward():
    assert layer_violations(runtime_graph(module_files())) == []


def test_the_layer_rule_catches_an_upward_import():
    graph = {"llava.model.builder": {"llava.cost.presets", "llava.plugin_api"}, "llava.eval.compare": {"llava.serve.panels"},
             "llava.utils": {"llava.constants"}}
    assert layer_violations(graph) == [
        "llava.eval.compare -> llava.serve.panels (llava.eval is layer 4, llava.serve layer 4)",
        "llava.model.builder -> llava.cost.presets (llava.model is layer 2, llava.cost layer 3)",
    ]


def test_the_model_never_imports_the_cost_engine():
    graph = runtime_graph(module_files(("llava",)))
    assert {m: sorted(t for t in targets if unit_of(t) == "llava.cost") for m, targets in graph.items()
            if unit_of(m) == "llava.model" and any(unit_of(t) == "llava.cost" for t in targets)} == {}


def _in_plugin_api(name: str) -> bool:
    return name == "llava.plugin_api" or name.startswith("llava.plugin_api.")


def test_the_plugin_api_imports_only_the_standard_library():
    """Every module of the package (layer 0 as a whole) imports the standard library and its own modules only."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    files = sorted((ROOT / "llava" / "plugin_api").glob("*.py"))
    assert (ROOT / "llava" / "plugin_api" / "__init__.py") in files and len(files) > 1
    sites = [site for path in files for site in import_sites(path) if not _in_plugin_api(site.name)]
    runtime = {site.name for site in sites if site.scope != "type-checking" and _top(site.name) not in stdlib}
    typing_only = {_top(site.name) for site in sites if site.scope == "type-checking"}
    # torch.nn is imported inside mlp_projector, when a plugin builds an MLP; nothing else outside the standard library
    assert runtime == {"torch.nn"} and typing_only <= {"torch"}


def test_importing_the_plugin_api_loads_no_torch():
    probe = "import llava.plugin_api, sys\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'numpy', 'transformers'}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_a_baseline_method_file_builds_on_the_plugin_api_alone():
    """A method file imports from llava only the plugin API (and, inside its view, llava's panel helpers)."""
    allowed = {"module": ("llava.plugin_api",), "function": ("llava.plugin_api", "llava.serve.panels")}
    offending = {}
    method_files = [*(ROOT / "braco_patch" / "baselines").glob("*.py"), *(ROOT / "braco_patch" / "reducers").glob("*.py")]
    for path in sorted(method_files):
        if path.name == "llava_plugin.py":  # the discovery module registers what it finds
            continue
        bad = sorted(f"{site.name} ({site.scope})" for site in import_sites(path) if _top(site.name) == "llava"
                     and not any(site.name == ok or site.name.startswith(ok + ".") for ok in allowed.get(site.scope, ())))
        if bad:
            offending[path.name] = bad
    assert offending == {}
