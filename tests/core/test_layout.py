"""The layout (README, "For contributors"): each notebook's own code in a folder of
``helpers/`` named after it, shared code in the core (``helpers/*.py``), processes in
``helpers/processes/``; no code imports a later notebook's; names say what a module holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
from course import HELPER_FOLDERS, ROOT, notebook_paths

HELPERS = ROOT / "helpers"
PROCESSES = "processes"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, importer: str) -> set[str]:
    """Every helpers module that ``source`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == "helpers" and name != importer}


def place(module: str) -> str:
    """``core``, ``processes``, or the number of the notebook whose folder holds ``module``;
    ``other`` for a name that is not a module (a function imported from one)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "core"
    if parts[1] == PROCESSES:
        return "processes"
    if parts[1] in NUMBER_OF_FOLDER:
        return NUMBER_OF_FOLDER[parts[1]]
    if (HELPERS / f"{parts[1]}.py").exists():
        return "core"
    return "other"


NUMBER_OF_FOLDER = {folder: name[:2] for name, folder in HELPER_FOLDERS.items()}
MODULES = {module_name(p): p for p in sorted(HELPERS.rglob("*.py"))}


def allowed(importer: str, imported: str) -> bool:
    """Core imports only core; processes, core and processes; a notebook's folder, those and
    its own or an earlier notebook's folder."""
    if imported == "other":
        return True
    if importer == "core":
        return imported == "core"
    if importer == "processes":
        return imported in ("core", "processes")
    return imported in ("core", "processes") or imported <= importer


def test_every_notebook_has_its_folder_and_every_folder_a_notebook():
    names = [p.name for p in notebook_paths()]
    assert list(HELPER_FOLDERS) == names
    folders = {p.name for p in HELPERS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    # locale/: the message catalogs (helpers/translation.py), data and no code
    assert folders == set(HELPER_FOLDERS.values()) | {PROCESSES, "locale"}
    assert not list((HELPERS / "locale").rglob("*.py"))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_later_notebooks_code(module):
    importer = place(module)
    wrong = [
        name
        for name in sorted(imported_modules(MODULES[module].read_text(), module))
        if not allowed(importer, place(name))
    ]
    assert not wrong, f"{module} ({importer}) imports {wrong}"


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.name)
def test_no_notebook_imports_a_later_notebooks_code(path):
    number = path.name[:2]
    code = "\n".join(
        "\n".join(line for line in c.source.splitlines() if not line.startswith(("%", "!")))
        for c in nbformat.read(path, as_version=4).cells
        if c.cell_type == "code"
    )
    wrong = sorted(n for n in imported_modules(code, "") if not allowed(number, place(n)))
    assert not wrong, f"notebook {number} imports {wrong}"


def test_the_import_check_sees_a_later_notebooks_import():
    """The check itself: a folder's import of a later notebook's folder, or core importing a
    folder, is refused; an earlier notebook's folder is allowed."""
    assert not allowed("07", place("helpers.capstone.capstone_run"))
    assert not allowed("core", place("helpers.at_scale.ddp_accumulation"))
    assert not allowed("processes", place("helpers.at_scale.ddp_runs"))
    assert allowed("09", place("helpers.training_stacks.stacks"))
    assert imported_modules("def f():\n    from helpers.capstone import capstone_run\n", "") >= {
        "helpers.capstone.capstone_run"
    }


def test_no_module_basename_repeats():
    paths = [*HELPERS.rglob("*.py"), *(ROOT / "loop_auditor").rglob("*.py")]
    names = [p.name for p in paths if p.name not in ("__init__.py", "__main__.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_a_notebooks_checkers_are_in_its_folder():
    """Each notebook's exercises call checkers from its own ``helpers/<folder>/checkers_NN``."""
    for path in notebook_paths():
        source = path.read_text(encoding="utf-8")
        folder, number = HELPER_FOLDERS[path.name], path.name[:2]
        checkers = set(re.findall(r"from (helpers[\w.]*\.checkers_\d\d) import", source))
        assert checkers == {f"helpers.{folder}.checkers_{number}"}, (path.name, checkers)
        assert (HELPERS / folder / f"checkers_{number}.py").exists()


def private_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers")
        for alias in node.names
        if alias.name.startswith("_") and alias.name != "_"  # gettext's `_`: public
    ]


def test_nothing_imported_across_modules_starts_with_an_underscore():
    everywhere = [*HELPERS.rglob("*.py"), *(ROOT / "loop_auditor").rglob("*.py")]
    everywhere += [*(ROOT / "tests").rglob("*.py"), *(ROOT / "tools").glob("*.py")]
    found = {str(p.relative_to(ROOT)): private_imports(p) for p in everywhere}
    assert {path: names for path, names in found.items() if names} == {}


def test_the_readme_maps_every_notebook_to_its_folder():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name, folder in HELPER_FOLDERS.items():
        assert f"| `{name}` | `helpers/{folder}/` | `tests/{folder}/` |" in readme, name
