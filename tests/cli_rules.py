"""A static checker of the command-line entry points: each command uses the one shared helper of each rule.

Read with ``ast`` only (nothing of the project is imported, so it runs in a second). The commands are found in the
tree: every module under ``llava/``, ``braco_patch/``, ``scripts/`` and ``examples/`` with an
``if __name__ == "__main__"`` block, every ``__main__.py``, every ``console_scripts`` entry of ``setup.py``, and every
``scripts/**/*.py``. A command's *closure* is the set of project modules it imports, transitively (``import``,
``from ... import``, function-local imports, ``importlib.import_module("...")``, and, for a module that calls
``import_module`` with a computed name, every project module named by a string in it).

The rules (``tests/test_cli_rules.py`` holds them):

1. **Outputs.** A command whose closure writes files (``open`` for writing, ``json.dump``, ``torch.save``,
   ``save_pretrained``, ``write_text``/``write_bytes``, ``shutil`` copies and moves, ``os.replace``, ``mkdir``, ...)
   calls one of the up-front checks of ``llava.outputs`` (:data:`GUARD_CHECKS`) in its closure. A write outside
   ``atomic_output``/``atomic_folder`` is *raw*; a raw write must not be reachable from the command through modules
   none of which calls such a check; and a bare ``open(..., "w")`` is refused anywhere (append mode only in a module
   that resumes through ``llava.outputs``' JSONL helpers).
2. **Network.** No module but ``llava/net.py`` imports an HTTP client (``requests``, ``httpx``, ``urllib.request``,
   ``http.client``, ``urllib3``, ``aiohttp``).
3. **Generation values.** A command that takes decoding flags (``--temperature``, ``--top_p``, ``--num_beams``,
   ``--max_new_tokens`` in any spelling) builds ``llava.generation.GenerationConfig`` or calls
   ``check_generation_values``; in a function that also loads a model, the check comes first.
4. **Devices.** A command with ``--device`` calls ``llava.devices.resolve_device``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("llava", "braco_patch")
SCRIPT_FOLDERS = ("scripts", "examples")

OUTPUTS = "llava.outputs"
#: The up-front checks: a command that writes calls one of them before any heavy work.
GUARD_CHECKS = frozenset(f"{OUTPUTS}.{name}" for name in (
    "guard_outputs", "check_outputs", "check_output_file", "check_output_folder", "check_writable_folder"))
#: Context managers whose block writes atomically (its writes are not raw).
ATOMIC_BLOCKS = frozenset(f"{OUTPUTS}.{name}" for name in ("atomic_output", "atomic_folder"))
#: Helpers of a resumable JSONL output (a module using them may append to it).
RESUME_HELPERS = frozenset(f"{OUTPUTS}.{name}" for name in (
    "read_jsonl_resumable", "scan_jsonl", "set_aside", "rejected_path"))
GENERATION_CHECKS = frozenset({"llava.generation.GenerationConfig", "llava.generation.check_generation_values"})
DEVICE_RESOLVER = "llava.devices.resolve_device"
#: HTTP client modules; only :data:`NET_MODULE` may import them.
HTTP_CLIENTS = ("requests", "httpx", "urllib.request", "http.client", "urllib3", "aiohttp")
NET_MODULE = "llava.net"
#: Every spelling of the decoding flags (upstream's underscores and our hyphenated aliases).
DECODING_FLAGS = frozenset(f"--{stem}{sep}{tail}" for stem, tail in (
    ("temperature", ""), ("top", "p"), ("num", "beams"), ("max", "new_tokens"), ("max", "new-tokens")) for sep in (("_", "-") if tail else ("",)))
#: Calls that load a model (the generation check must come before them in the same function).
MODEL_LOADS = frozenset({"load_pretrained_model", "load_generator", "from_pretrained"})

#: Write calls by canonical name, and write methods by attribute name (any object that is not a module).
WRITE_FUNCTIONS = frozenset({
    "json.dump", "torch.save", "numpy.save", "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree",
    "shutil.move", "os.replace", "os.rename", "os.makedirs", "os.mkdir", "os.symlink", "os.link"})
WRITE_METHODS = frozenset({
    "save_pretrained", "write_text", "write_bytes", "savefig", "to_excel", "to_csv", "to_parquet", "mkdir", "touch",
    "save", "symlink_to"})
_WRITE_FLAGS = re.compile(r"O_(WRONLY|RDWR|CREAT|APPEND|TRUNC)")


@dataclass
class Module:
    """One Python file of the project: its import name (or ``scripts/...py`` path for a script), and its tree."""

    name: str
    path: Path
    tree: ast.Module
    package: str  # what a relative import is relative to
    root: Path
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> fully qualified name
    imports: set[str] = field(default_factory=set)  # project modules it imports

    @property
    def shown(self) -> str:
        """The file, relative to the tree's root."""
        return self.path.relative_to(self.root).as_posix()


@dataclass(frozen=True)
class Site:
    """A call found in a module: where, what (canonical name), and in which function."""

    module: str
    line: int
    name: str
    function: str
    raw: bool = True  # a write outside an atomic block

    def describe(self, shown: str) -> str:
        return f"{shown}:{self.line} {self.name} in {self.function}()"


class Project:
    """All modules of a source tree, their imports resolved within the tree."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.modules: dict[str, Module] = {}
        for package in PACKAGES:
            for path in sorted((root / package).rglob("*.py")):
                parts = list(path.relative_to(root).with_suffix("").parts)
                is_init = parts[-1] == "__init__"
                name = ".".join(parts[:-1] if is_init else parts)
                self._add(name, path, name if is_init else name.rpartition(".")[0])
        for folder in SCRIPT_FOLDERS:
            for path in sorted((root / folder).rglob("*.py")):
                self._add(path.relative_to(root).as_posix(), path, "")
        for module in self.modules.values():
            _resolve_imports(module, self)

    def _add(self, name: str, path: Path, package: str) -> None:
        self.modules[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8"), str(path)), package, self.root)

    def sibling_script(self, module: Module, name: str) -> str | None:
        """A script's import of a file next to it (``from convert_x import y`` run as ``python scripts/...``)."""
        if module.package or "." in name:
            return None
        candidate = module.path.with_name(name + ".py")
        key = candidate.relative_to(self.root).as_posix() if candidate.is_relative_to(self.root) else candidate.name
        return key if key in self.modules else None

    def closure(self, name: str) -> list[Module]:
        """``name`` and every project module it imports, transitively (breadth first)."""
        seen, order = {name}, [name]
        for current in order:
            for imported in sorted(self.modules[current].imports - seen):
                seen.add(imported)
                order.append(imported)
        return [self.modules[n] for n in order]

    def canonical(self, name: str) -> str:
        """Follow re-exports: ``llava.generation.resolve_device`` -> ``llava.devices.resolve_device``."""
        for _ in range(10):
            owner, _, attribute = name.rpartition(".")
            module = self.modules.get(owner)
            target = module.aliases.get(attribute) if module is not None else None
            if target is None or target == name:
                return name
            name = target
        return name


def _absolute(module: Module, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.package.split(".") if module.package else []
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, *([name] if name else [])])


def _resolve_imports(module: Module, project: Project) -> None:
    """Fill ``module.aliases`` and ``module.imports`` from every import statement of the file (local ones too)."""
    known = project.modules
    dynamic = False
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = project.sibling_script(module, alias.name) or alias.name
                module.aliases[alias.asname or alias.name.partition(".")[0]] = alias.name if alias.asname else alias.name.partition(".")[0]
                if target in known:
                    module.imports.add(target)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node.level, node.module)
            sibling = project.sibling_script(module, base)
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                module.aliases[alias.asname or alias.name] = full
                if full in known:
                    module.imports.add(full)
                elif (sibling or base) in known:
                    module.imports.add(sibling or base)
        elif isinstance(node, ast.Call) and _last_name(node.func) == "import_module":
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                if argument.value in known:
                    module.imports.add(argument.value)
            else:
                dynamic = True
    if dynamic:  # a computed module name: count every project module named by a string of the file
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known and node.value != module.name:
                module.imports.add(node.value)
    module.imports.discard(module.name)


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def qualified(node: ast.AST, module: Module, project: Project) -> tuple[str | None, bool]:
    """The canonical name a call's function denotes, and whether its head is an imported module or name.

    ``outputs.write_text`` after ``from llava import outputs`` -> (``llava.outputs.write_text``, True);
    ``path.write_text`` on a local variable -> (``path.write_text``, False).
    """
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):  # a call on an expression: ``Path(x).write_text(...)``
        return (".".join(["<expression>", *reversed(parts)]) if parts else None), False
    head = module.aliases.get(node.id)
    if head is None:
        return ".".join([node.id, *reversed(parts)]), False
    return project.canonical(".".join([head, *reversed(parts)])), True


class _Scanner(ast.NodeVisitor):
    """Collects the calls of one module with their enclosing function and whether an atomic block encloses them."""

    def __init__(self, module: Module, project: Project) -> None:
        self.module, self.project = module, project
        self.functions: list[str] = ["<module>"]
        self.atomic = 0
        self.calls: list[tuple[ast.Call, str, bool, str | None, bool]] = []  # node, function, atomic, name, imported
        self.buffers: set[str] = set()  # names bound to in-memory files

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        atomic = any(isinstance(item.context_expr, ast.Call)
                     and qualified(item.context_expr.func, self.module, self.project)[0] in ATOMIC_BLOCKS
                     for item in node.items)
        for item in node.items:
            self.visit(item)
        self.atomic += atomic
        for statement in node.body:
            self.visit(statement)
        self.atomic -= atomic

    visit_AsyncWith = visit_With

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Call) and _last_name(node.value.func) in ("BytesIO", "StringIO"):
            self.buffers.update(target.id for target in node.targets if isinstance(target, ast.Name))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name, imported = qualified(node.func, self.module, self.project)
        self.calls.append((node, self.functions[-1], self.atomic > 0, name, imported))
        self.generic_visit(node)


def _scan(module: Module, project: Project) -> _Scanner:
    scanner = _Scanner(module, project)
    scanner.visit(module.tree)
    return scanner


def _open_mode(node: ast.Call, name: str, imported: bool) -> str | None:
    """The mode string of an ``open`` call (``None`` when it is not a constant)."""
    for keyword in node.keywords:
        if keyword.arg == "mode":
            value = keyword.value
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    # open(path, mode), io.open / gzip.open / av.open(path, mode); path.open(mode) on a Path object
    index = 1 if (name in ("open", "io.open") or imported) else 0
    if len(node.args) > index and isinstance(node.args[index], ast.Constant) and isinstance(node.args[index].value, str):
        return node.args[index].value
    return "r"


def _write_kind(node: ast.Call, name: str | None, imported: bool, buffers: set[str]) -> str | None:
    """What a call writes (``"open:w"``, ``"open:a"``, ``"torch.save"``, ...), or ``None`` for no file write."""
    if name is None or name.startswith(OUTPUTS + "."):
        return None
    last = name.rpartition(".")[2]
    target = node.args[0] if node.args else None
    if isinstance(target, ast.Name) and target.id in buffers:
        return None  # an in-memory file (BytesIO), not the disk
    if name == "os.open":
        flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
        return "os.open:" + ("a" if "APPEND" in flags else "w") if _WRITE_FLAGS.search(flags) else None
    if last == "open":
        mode = _open_mode(node, name, imported)
        if mode is None or any(flag in mode for flag in "wx+"):
            return "open:w"
        return "open:a" if "a" in mode else None
    if name in WRITE_FUNCTIONS:
        return name
    if not imported and last in WRITE_METHODS and "." in name:
        return "." + last
    return None


@dataclass
class Facts:
    """What one module does, as far as the rules care."""

    writes: list[Site]
    guard_checks: list[Site]
    resumes: bool
    generation_checks: list[Site]
    device_resolves: list[Site]
    model_loads: list[Site]
    flags: set[str]
    http_imports: list[tuple[int, str]]


def facts(module: Module, project: Project) -> Facts:
    """Read one module: its writes, its calls of the shared helpers, the flags it declares, its HTTP imports."""
    scanner = _scan(module, project)
    result = Facts([], [], False, [], [], [], set(), [])
    for node, function, atomic, name, imported in scanner.calls:
        site = Site(module.name, node.lineno, name or "?", function, raw=not atomic)
        kind = _write_kind(node, name, imported, scanner.buffers)
        if kind is not None:
            result.writes.append(Site(module.name, node.lineno, kind, function, raw=not atomic))
        if name in GUARD_CHECKS:
            result.guard_checks.append(site)
        result.resumes |= name in RESUME_HELPERS
        if name in GENERATION_CHECKS:
            result.generation_checks.append(site)
        if name == DEVICE_RESOLVER:
            result.device_resolves.append(site)
        if name is not None and name.rpartition(".")[2] in MODEL_LOADS:
            result.model_loads.append(site)
        result.flags.update(arg.value for arg in node.args
                            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"))
    for node in ast.walk(module.tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Call) and _last_name(node.func) == "import_module" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names = [node.args[0].value]
        for imported_name in names:
            if any(imported_name == client or imported_name.startswith(client + ".") for client in HTTP_CLIENTS):
                result.http_imports.append((node.lineno, imported_name))
    return result


# ---------------------------------------------------------------------- the commands


def _is_main_block(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":``"""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)


def console_scripts(setup_py: Path) -> list[str]:
    """The modules of ``setup.py``'s ``console_scripts`` entries (``"braco = braco_patch.cli:main"``)."""
    if not setup_py.is_file():
        return []
    found = []
    for node in ast.walk(ast.parse(setup_py.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "console_scripts" and isinstance(value, (ast.List, ast.Tuple)):
                    found += [element.value.split("=", 1)[1].split(":")[0].strip() for element in value.elts
                              if isinstance(element, ast.Constant) and "=" in str(element.value)]
    return found


def commands(project: Project) -> list[str]:
    """Every command of the tree (module names; scripts by their path), sorted."""
    found = set(m for m in console_scripts(project.root / "setup.py") if m in project.modules)
    for name, module in project.modules.items():
        if (module.path.name == "__main__.py" or name.startswith("scripts/")
                or any(_is_main_block(statement) for statement in module.tree.body)):
            found.add(name)
    return sorted(found)


# ---------------------------------------------------------------------- the rules


@dataclass
class Checker:
    """Checks every command of ``project``; ``write_exceptions`` maps (module, function) -> why a raw write there
    needs no up-front check (function ``"*"``: the whole module)."""

    project: Project
    write_exceptions: dict[tuple[str, str], str] = field(default_factory=dict)
    _facts: dict[str, Facts] = field(default_factory=dict)

    def facts(self, name: str) -> Facts:
        if name not in self._facts:
            self._facts[name] = facts(self.project.modules[name], self.project)
        return self._facts[name]

    def _writes(self, name: str) -> list[Site]:
        """The write sites of a module, less the listed exceptions (``llava.outputs`` is the helper itself)."""
        if name == OUTPUTS or (name, "*") in self.write_exceptions:
            return []
        return [site for site in self.facts(name).writes if (site.module, site.function) not in self.write_exceptions]

    def _shown(self, site: Site) -> str:
        return site.describe(self.project.modules[site.module].shown)

    def outputs(self, command: str) -> Iterator[str]:
        """Rule 1 for one command: an up-front check when it writes; no raw write reachable around the checks."""
        closure = self.project.closure(command)
        writes = [site for module in closure for site in self._writes(module.name)]
        if writes and not any(self.facts(module.name).guard_checks for module in closure):
            yield (f"outputs: {command} writes ({self._shown(writes[0])}) but never calls an up-front check of "
                   f"llava.outputs ({', '.join(sorted(n.rpartition('.')[2] for n in GUARD_CHECKS))})")
        # Modules reachable from the command through modules that check no output: their raw writes are unguarded.
        seen, queue = {command}, [(command, (command,))]
        for name, path in queue:
            if self.facts(name).guard_checks:
                continue
            for site in self._writes(name):
                if site.raw:
                    yield (f"outputs: {command} reaches a write outside atomic_output/atomic_folder with no "
                           f"up-front check on the way ({' -> '.join(path)}): {self._shown(site)}")
            for imported in sorted(self.project.modules[name].imports - seen):
                seen.add(imported)
                queue.append((imported, (*path, imported)))

    def bare_opens(self, names: Iterable[str]) -> Iterator[str]:
        """Rule 1, per module: no ``open`` for writing outside ``atomic_output``; append only to resume."""
        for name in names:
            if name == OUTPUTS:
                continue
            for site in self._writes(name):
                if not site.raw or not site.name.endswith(("open:w", "open:a")):
                    continue
                if site.name.endswith("open:a") and self.facts(name).resumes:
                    continue
                why = "appends without llava.outputs' resume helpers" if site.name.endswith(":a") else \
                    "opens a file for writing itself; use llava.outputs.atomic_output"
                yield f"outputs: {self._shown(site)} {why}"

    def network(self, names: Iterable[str]) -> Iterator[str]:
        """Rule 2: only llava/net.py imports an HTTP client."""
        for name in names:
            if name != NET_MODULE:
                for line, imported in self.facts(name).http_imports:
                    yield (f"network: {self.project.modules[name].shown}:{line} imports {imported}; outgoing HTTP goes "
                           "through llava.net (total deadline, size cap, no cross-origin redirect)")

    def generation(self, command: str) -> Iterator[str]:
        """Rule 3: decoding flags are checked by llava.generation, before a model loads."""
        closure = self.project.closure(command)
        flags = set().union(*(self.facts(module.name).flags for module in closure)) & DECODING_FLAGS
        if not flags:
            return
        checks = [site for module in closure for site in self.facts(module.name).generation_checks]
        if not checks:
            yield (f"generation: {command} takes {', '.join(sorted(flags))} but never builds "
                   "llava.generation.GenerationConfig nor calls check_generation_values")
        for module in closure:
            found = self.facts(module.name)
            for load in found.model_loads:
                first = min((c.line for c in found.generation_checks if c.function == load.function), default=None)
                if first is not None and first > load.line:
                    yield (f"generation: {self._shown(load)} loads a model before the generation values are "
                           f"checked (line {first})")

    def devices(self, command: str) -> Iterator[str]:
        """Rule 4: ``--device`` goes through llava.devices.resolve_device."""
        closure = self.project.closure(command)
        if any("--device" in self.facts(module.name).flags for module in closure) and not any(
                self.facts(module.name).device_resolves for module in closure):
            yield f"devices: {command} takes --device but never calls llava.devices.resolve_device"

    def violations(self, names: Iterable[str] | None = None) -> list[str]:
        """Every breach of the four rules by the given commands (default: all of the tree's)."""
        chosen = commands(self.project) if names is None else list(names)
        reached = sorted({module.name for command in chosen for module in self.project.closure(command)})
        found = [*self.bare_opens(reached), *self.network(self.project.modules)]
        for command in chosen:
            found += [*self.outputs(command), *self.generation(command), *self.devices(command)]
        return sorted(dict.fromkeys(found))
