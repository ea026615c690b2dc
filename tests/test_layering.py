"""The package's layering (issues #14 and #25, docs/INTERNALS.md "Layering"): stage folders in pipeline order,
imports only downward, no module over 600 lines, no function over 120 lines, no private name used outside its
module, no import cycle inside a folder, loads by name declared.

The import graph is read with `ast` from every module of toolkit/fluidml_xc: module-level and function-level
imports, relative and absolute. Known exceptions are explicit allowlists below, each entry with its reason;
an entry that no longer applies fails too, so the lists only shrink.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "fluidml_xc"
SOURCE = Path(__file__).resolve().parent.parent / "toolkit" / PACKAGE
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 120

STAGE_NAMES = ("base", "target", "kernels", "ops", "planning", "frontend", "passes", "fluid", "emit", "pipeline",
               "run", "remote", "apps", "commands")
"""Pipeline order: a module may import from its own stage and earlier ones (base modules import no stage).
kernels/ (the kernel knowledge: builder, loops, vectors, epilogues, row walkers, Conv and MatMul geometry and tiles,
the blocked float and int8 GEMMs, the integer kernels) imports only base modules and target/ (the per-architecture
table) and comes before the stages that ask it: ops (which lower with it), passes (lowp rules, scalar steps) and the
cost model (tiles, geometry). ops/ (registrations and lowerings) imports only kernels/, target/ and base modules, so
it comes right after kernels/. planning/ (the memory planner: graph arithmetic over base modules and OpSpec's in-place
and view rules) comes before the passes that weigh a rewrite by its arena bound (passes/concat_split.py asks
planning.op_lower_bound); the pipeline still runs it after the optimizer."""

STAGES: dict[str, str] = {
    # module or package (the longest prefix wins) -> stage
    PACKAGE: "base", "ir": "base", "dtypes": "base", "errors": "base", "progress": "base", "tempfiles": "base",
    "resources": "base", "sizes": "base", "npyio": "base", "cast_rules": "base", "extras": "base",
    "opspec": "base", "einsum_equation": "base", "shortnames": "base", "results": "base", "timings": "base", "symbolic": "base",
    "strings": "base",
    "frontend": "frontend",
    "passes": "passes",
    "fluid": "fluid",
    "planning": "planning",
    "kernels": "kernels",
    "ops": "ops",
    "emit": "emit",
    "target": "target",
    "pipeline": "pipeline", "artifact": "pipeline", "build": "pipeline", "plan_cache": "pipeline",
    "run": "run", "reference": "run", "conformance": "run",
    "remote": "remote",
    "quantize": "apps", "report": "apps", "fleet": "apps", "examples": "apps",
    "commands": "commands", "cli": "commands",
}

UPWARD_ALLOWED: dict[tuple[str, str], str] = {
    # (importer, imported) -> why it is still there and who removes it
}

LONG_MODULES: dict[str, str] = {
    # module over MAX_MODULE_LINES -> who splits it
}

LONG_FUNCTIONS: dict[str, str] = {
    # "module:qualified.name" over MAX_FUNCTION_LINES -> who splits it
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SOURCE.rglob("*.py"))}


MODULES = _modules()
TEXTS = {module: path.read_text(encoding="utf-8") for module, path in MODULES.items()}
TREES = {module: ast.parse(text, str(MODULES[module])) for module, text in TEXTS.items()}


def _short(module: str) -> str:
    return module[len(PACKAGE) + 1:] if module.startswith(PACKAGE + ".") else module


def _source(module: str, node: ast.ImportFrom) -> str:
    """The absolute module name `from X import ...` in MODULE reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")[:len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> list[Import]:
    """Every import of a package module in MODULE, at any depth; `from A import b` counts as A.b when that is a
    module, else as A."""
    found = []
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _source(module, node)
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]
        else:
            continue
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                while target not in MODULES:  # `import fluidml_xc.x.name`-style references to attributes
                    target = target.rpartition(".")[0]
                found.append(Import(module, target, node.lineno))
    return found


IMPORTS = [imp for module in MODULES for imp in _imports(module)]


def stage_of(module: str) -> str:
    name = _short(module) if module != PACKAGE else PACKAGE
    while name:
        if name in STAGES:
            return STAGES[name]
        name = name.rpartition(".")[0]
    raise KeyError(module)


def _is_upward(imp: Import) -> bool:
    here, there = stage_of(imp.importer), stage_of(imp.imported)
    if here == "base":
        return there != "base"
    return STAGE_NAMES.index(there) > STAGE_NAMES.index(here)


def _where(module: str) -> str:
    return str(MODULES[module].relative_to(SOURCE.parent.parent))


def test_every_module_has_a_stage():
    unplaced = [_where(m) for m in MODULES if not _has_stage(m)]
    assert not unplaced, f"modules without a stage (add them to STAGES in tests/test_layering.py): {unplaced}"


def _has_stage(module: str) -> bool:
    try:
        stage_of(module)
    except KeyError:
        return False
    return True


def test_stage_entries_name_modules():
    stale = [name for name in STAGES if name != PACKAGE
             and not any(m == f"{PACKAGE}.{name}" or m.startswith(f"{PACKAGE}.{name}.") for m in MODULES)]
    assert not stale, f"STAGES entries naming no module or package: remove them from tests/test_layering.py: {stale}"


def test_imports_point_downward():
    upward = [imp for imp in IMPORTS if _is_upward(imp)]
    bad = [f"{_where(i.importer)}:{i.line}: {_short(i.importer)} ({stage_of(i.importer)}) imports {_short(i.imported)} "
           f"({stage_of(i.imported)})" for i in upward if (_short(i.importer), _short(i.imported)) not in UPWARD_ALLOWED]
    assert not bad, "imports pointing to a later stage:\n" + "\n".join(bad)


def test_upward_allowlist_only_shrinks():
    present = {(_short(i.importer), _short(i.imported)) for i in IMPORTS if _is_upward(i)}
    stale = sorted(set(UPWARD_ALLOWED) - present)
    assert not stale, f"UPWARD_ALLOWED entries that no longer occur: remove them from tests/test_layering.py: {stale}"


def _function_lengths(tree: ast.Module) -> dict[str, int]:
    lengths = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
    visit(tree, "")
    return lengths


def test_modules_are_short():
    long = {_short(m): n for m, text in TEXTS.items() if (n := len(text.splitlines())) > MAX_MODULE_LINES}
    bad = [f"{_where(PACKAGE + '.' + m)}: {n} lines" for m, n in long.items() if m not in LONG_MODULES]
    assert not bad, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(bad)
    stale = sorted(set(LONG_MODULES) - set(long))
    assert not stale, f"LONG_MODULES entries now short enough (or gone): remove them: {stale}"


def test_functions_are_short():
    long = {f"{_short(m)}:{name}": n for m, tree in TREES.items() for name, n in _function_lengths(tree).items()
            if n > MAX_FUNCTION_LINES}
    bad = [f"{k}: {n} lines" for k, n in long.items() if k not in LONG_FUNCTIONS]
    assert not bad, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(bad)
    stale = sorted(set(LONG_FUNCTIONS) - set(long))
    assert not stale, f"LONG_FUNCTIONS entries now short enough (or gone): remove them: {stale}"


PLUGIN_LOADS: dict[str, tuple[str, str]] = {
    # module that loads package modules by name (importlib) -> (what it loads, why)
    "opspec": ("ops", "the registry loads every op family on its first lookup; ops/ imports only kernels/, target/ "
                      "and base modules (test_imports_point_downward), so the load closes no cycle"),
    "ops": ("ops", "load_families imports each family module of the package"),
    "passes": ("passes", "the pass registry imports each pass module of the package"),
    "cli": ("commands", "each command module registers its subcommand"),
}
"""Loads by name that the import graph cannot see, each declared with its target."""


def _private_imports(module: str) -> list[str]:
    """`from M import _name` and `M._name` reads where M is another module of the package."""
    found = []
    aliases: dict[str, str] = {}
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.ImportFrom):
            for imp in _imports_of(module, node):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__") and imp.imported != module:
                        found.append(f"{_where(module)}:{node.lineno}: {_short(module)} imports "
                                     f"{_short(imp.imported)}.{alias.name}")
                    if imp.imported == f"{_source(module, node)}.{alias.name}":
                        aliases[alias.asname or alias.name] = imp.imported
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE) and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(TREES[module]):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__") and aliases[node.value.id] != module):
            found.append(f"{_where(module)}:{node.lineno}: {_short(module)} reads "
                         f"{_short(aliases[node.value.id])}.{node.attr}")
    return sorted(set(found))


def _imports_of(module: str, node: ast.ImportFrom) -> list[Import]:
    return [imp for imp in IMPORTS if imp.importer == module and imp.line == node.lineno]


def test_no_private_names_across_modules():
    bad = [line for module in MODULES for line in _private_imports(module)]
    assert not bad, ("private names used across modules (make them public where they belong, or move the "
                     "code that needs them):\n" + "\n".join(bad))


def _folder(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _cycles_inside_folders() -> list[list[str]]:
    """Strongly connected groups (more than one module) of the import graph restricted to each folder."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        if imp.importer != imp.imported and _folder(imp.importer) == _folder(imp.imported):
            edges[imp.importer].add(imp.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def test_no_import_cycles_inside_a_folder():
    cycles = _cycles_inside_folders()
    assert not cycles, "modules of one folder importing each other in a circle:\n" + "\n".join(
        " <-> ".join(_short(m) for m in group) for group in cycles)


def _loads_by_name(module: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "import_module" for n in ast.walk(TREES[module]))


def test_loads_by_name_are_declared():
    undeclared = [_short(m) for m in MODULES if _loads_by_name(m) and _short(m) not in PLUGIN_LOADS
                  and _short(m) != "extras"]  # extras imports optional third-party packages, none of ours
    assert not undeclared, f"modules loading package modules by name, not declared in PLUGIN_LOADS: {undeclared}"
    stale = [name for name in PLUGIN_LOADS if not _loads_by_name(f"{PACKAGE}.{name}")]
    assert not stale, f"PLUGIN_LOADS entries that no longer load anything by name: remove them: {stale}"


def test_op_families_import_only_kernels_target_and_base():
    allowed = {"base", "target", "kernels", "ops"}
    bad = sorted({f"{_where(i.importer)}:{i.line}: {_short(i.importer)} imports {_short(i.imported)} ({stage_of(i.imported)})"
                  for i in IMPORTS if stage_of(i.importer) == "ops" and stage_of(i.imported) not in allowed})
    assert not bad, "ops/ may import only kernels/, target/ and base modules (opspec loads it by name):\n" + "\n".join(bad)
