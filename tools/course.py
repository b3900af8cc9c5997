"""What the course tools share: where things are, the notebooks in order, the public URL."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
BRANCH = "main"

# Each notebook's own code lives in a folder of helpers/ named after it (README, "For
# contributors"); what two or more notebooks share is the core, helpers/*.py.
HELPER_FOLDERS = {
    "00_setup_check.ipynb": "setup_check",
    "01_autograd_accumulates.ipynb": "autograd_accumulates",
    "02_zero_grad_internals.ipynb": "zero_grad_internals",
    "03_gradient_accumulation.ipynb": "gradient_accumulation",
    "04_several_losses.ipynb": "several_losses",
    "05_pitfalls.ipynb": "pitfalls",
    "06_loop_auditor.ipynb": "audit_and_repair",
    "07_accumulation_at_scale.ipynb": "at_scale",
    "08_training_stacks.ipynb": "training_stacks",
    "09_capstone.ipynb": "capstone",
}


def notebook_paths() -> list[Path]:
    """The course notebooks in order: ``notebooks/NN_name.ipynb``."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def repository_url() -> str:
    """The public repository URL: ``[project.urls] Repository`` in pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^Repository\s*=\s*"([^"]+)"', text, flags=re.MULTILINE)
    if match is None:
        raise ValueError("pyproject.toml has no [project.urls] Repository = '...' line")
    url = match.group(1).rstrip("/")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"Repository must be https://github.com/OWNER/NAME, got {url!r}")
    return url


def launch_links(
    filename: str, url: str | None = None, folder: str = "notebooks"
) -> dict[str, str]:
    """Where a notebook opens online, from the one setting (the repository URL and BRANCH):
    ``{"Open in Colab": ..., "Launch Binder": ...}``. The notebooks' link cell and the site's
    launch bar are both made from it. ``folder`` is the notebook's folder in the repository
    (``notebooks/zh-CN`` for the Chinese edition)."""
    owner_repo = (url or repository_url()).removeprefix("https://github.com/")
    folder = folder.strip("/")
    return {
        "Open in Colab": (
            f"https://colab.research.google.com/github/{owner_repo}/blob/{BRANCH}"
            f"/{folder}/{filename}"
        ),
        "Launch Binder": (
            f"https://mybinder.org/v2/gh/{owner_repo}/{BRANCH}?urlpath=lab/tree/{folder}/{filename}"
        ),
    }


def pinned_torch(constraints: Path = ROOT / "constraints.txt") -> str:
    """The torch version that the committed outputs are made with: constraints.txt's pin."""
    match = re.search(r"^torch==(\S+)$", constraints.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise ValueError(f"{constraints.name} pins no torch==VERSION")
    return match.group(1)


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def write(nb: nbformat.NotebookNode, path: Path) -> None:
    nbformat.write(nb, path)


def title(nb: nbformat.NotebookNode) -> str:
    """The notebook's title: the text of the ``# `` heading in its first cell."""
    first = nb.cells[0]
    match = re.match(r"#\s+(.+)", first.source.strip()) if first.cell_type == "markdown" else None
    if match is None:
        raise ValueError("a course notebook starts with a markdown cell '# NN · Title'")
    return match.group(1).strip()


def cells_tagged(nb: nbformat.NotebookNode, tag: str) -> list[int]:
    return [i for i, cell in enumerate(nb.cells) if tag in cell.get("metadata", {}).get("tags", [])]
