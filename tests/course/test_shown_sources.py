"""The code a notebook shows is the code that runs: each ``show_source(name)`` cell prints
the current source of a function from the course's packages, and the runners use it."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest
from course import notebook_paths, read

from helpers import training
from helpers.source import show_source

SHOW = re.compile(r"^show_source\(([\w.]+)\)$", re.MULTILINE)  # name, or module.name
IMPORT = re.compile(r"^from ([\w.]+) import (?:\(([^)]*)\)|([\w, ]+)$)", re.MULTILINE)


def shown_cells():
    for path in notebook_paths():
        nb = read(path)
        imports = {}
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            for module, grouped, names in IMPORT.findall(cell.source):
                for name in re.split(r"[,\s]+", (grouped or names).strip()):
                    if name:
                        imports[name] = module
            names = SHOW.findall(cell.source)
            if names:
                yield path.name, cell, [resolve(name, imports) for name in names]


def resolve(shown: str, imports: dict[str, str]) -> tuple[str, str | None]:
    """(function name, its module) for ``name`` imported by name, or ``module.name`` with
    the module imported (``from helpers import stacks``)."""
    if "." not in shown:
        return shown, imports.get(shown)
    module, name = shown.rsplit(".", 1)
    package = imports.get(module)
    return name, f"{package}.{module}" if package else None


CELLS = list(shown_cells())


def test_the_notebooks_show_their_loops():
    shown = {name for _, _, pairs in CELLS for name, _ in pairs}
    assert {"sgd_loop", "compare_zero_grad", "scale_after_accumulating"} <= shown, shown


@pytest.mark.parametrize("notebook, cell, pairs", CELLS, ids=[c[0] for c in CELLS])
def test_a_shown_function_is_printed_as_it_is_now(notebook, cell, pairs):
    printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    for name, module in pairs:
        assert module and module.split(".")[0] in ("helpers", "loop_auditor"), (name, module)
        function = getattr(importlib.import_module(module), name)
        assert inspect.getsource(function).rstrip() in printed, f"{notebook}: rerun {name}"


def test_train_steps_runs_the_loop_notebook_01_shows(monkeypatch):
    import torch

    calls = []
    real = training.sgd_loop
    monkeypatch.setattr(training, "sgd_loop", lambda *args: calls.append(args[3]) or real(*args))
    model = torch.nn.Linear(2, 1)
    batches = [(torch.ones(3, 2), torch.zeros(3, 1))]
    training.compare_zero_grad(model, batches, steps=4, lr=0.1)
    assert calls == [4, 4]


def test_show_source_refuses_what_is_not_a_function():
    with pytest.raises(TypeError, match="function or class"):
        show_source(3)
