"""Regenerate every notebook's launch links, setup cell and link to the next notebook from the
repository URL in pyproject.toml.

The setup cell stays out of the learner's way: its first line is a title, and its metadata
folds its code in JupyterLab (``jupyter.source_hidden``) and makes it a form on Colab
(``cellView: form``, with the title's ``display-mode: "form"``). The course site folds it too.

    python tools/sync_notebooks.py          # rewrite what drifted
    python tools/sync_notebooks.py --check  # list what drifted, exit 1 if anything did
"""

from __future__ import annotations

import argparse
import re
import sys

import nbformat
from course import cells_tagged, launch_links, notebook_paths, read, repository_url, title, write

BADGES_TAG = "course-badges"
SETUP_TAG = "course-setup"
NEXT_TAG = "course-next"

SETUP_TITLE = "Course setup (run it first): the helpers, and a torch new enough"
SETUP_METADATA = {"jupyter": {"source_hidden": True}, "cellView": "form"}
SETUP_ABOUT = """\
# Written by tools/sync_notebooks.py. On Colab it first fetches the course and installs what
# Colab lacks. On a torch or Python too old for this notebook it stops with the fix; else it
# is silent."""
# The template's two inline comments, which a translated edition gives in its language.
SETUP_COMMENTS = {
    "keep_torch": "never torch: Colab's own build stays",
    "auditor_path": "the loop auditor's package",
}
SETUP_TEMPLATE = """\
# @title {title} {{ display-mode: "form" }}
{about}
import importlib.util, os, pathlib, subprocess, sys  # noqa: E401, I001
{language}
URL = "{url}"
COURSE_REPO = os.environ.get("COURSE_REPO", URL)
if importlib.util.find_spec("helpers") is None:
    if "google.colab" in sys.modules:
        root = pathlib.Path.cwd() / "{name}"
        if not root.exists():
            subprocess.run(["git", "clone", "-q", "--depth=1", COURSE_REPO, str(root)], check=True)
        lacking = [pkg for pkg in ("matplotlib", "ipywidgets") if not importlib.util.find_spec(pkg)]
        if lacking:  # {keep_torch}
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", *lacking], check=True)
    else:
        here = pathlib.Path.cwd().resolve()
        root = next((p for p in (here, *here.parents) if (p / "helpers").is_dir()), here.parent)
    sys.path[:0] = [str(root), str(root / "loop_auditor" / "src")]  # {auditor_path}
from helpers.versions import stop_unless_supported

stop_unless_supported("{notebook}")"""


def badges_source(url: str, filename: str) -> str:
    """The cell under the title: text links (no badge images, which show as broken offline)."""
    links = launch_links(filename, url)
    return "**Run it online:** " + " · ".join(f"[{name}]({href})" for name, href in links.items())


def setup_source(
    url: str,
    notebook: str,
    *,
    title: str = SETUP_TITLE,
    about: str = SETUP_ABOUT,
    language: str | None = None,
    comments: dict[str, str] | None = None,
) -> str:
    """The setup cell of ``notebook`` (its file name, or the name without ``.ipynb``).
    A translated edition passes its own ``title``, ``about`` (comment lines) and inline
    ``comments`` (SETUP_COMMENTS's keys) and its ``language`` (``zh_CN``): the cell then sets
    ``GM_LANG`` to it, unless the environment already does, before the helpers are imported."""
    comments = {**SETUP_COMMENTS, **(comments or {})}
    if set(comments) != set(SETUP_COMMENTS):
        keys = sorted(SETUP_COMMENTS)
        raise ValueError(f"comments takes the keys {keys}, got {sorted(comments)}")
    stem = notebook[: -len(".ipynb")] if notebook.endswith(".ipynb") else notebook
    if language is not None and not re.fullmatch(r"[a-z]{2}(_[A-Z]{2})?", language):
        raise ValueError(f"language must be a locale name such as 'zh_CN', got {language!r}")
    setting = f'\nos.environ.setdefault("GM_LANG", "{language}")' if language else ""
    return SETUP_TEMPLATE.format(
        title=title,
        about=about,
        language=setting,
        url=url,
        name=url.rsplit("/", 1)[-1],
        notebook=stem,
        **comments,
    )


def next_source(next_title: str | None, next_file: str | None) -> str:
    if next_file is None:
        return (
            "**Next:** this is the last notebook published so far. "
            "Back to the [course overview](../README.md)."
        )
    return f"**Next:** [{next_title}]({next_file})"


def _set(nb, tag: str, kind: str, source: str, position: int, metadata: dict | None = None) -> bool:
    """Give the cell tagged ``tag`` this source and these metadata entries (creating it at
    ``position``); True if anything changed."""
    metadata = metadata or {}
    found = cells_tagged(nb, tag)
    if not found:
        maker = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.insert(position, maker(source, metadata={"tags": [tag], **metadata}))
        return True
    cell = nb.cells[found[0]]
    changed = cell.source != source or cell.cell_type != kind
    cell.source = source
    for key, value in metadata.items():
        if cell.metadata.get(key) != value:
            cell.metadata[key] = nbformat.from_dict(value) if isinstance(value, dict) else value
            changed = True
    return changed


def sync(check: bool = False) -> list[str]:
    """Bring every notebook in line with the URL; return the names of those that drifted."""
    url = repository_url()
    paths = notebook_paths()
    notebooks = [read(path) for path in paths]
    drifted = []
    for index, (path, nb) in enumerate(zip(paths, notebooks, strict=True)):
        following = index + 1 < len(paths)
        next_title = title(notebooks[index + 1]) if following else None
        next_file = paths[index + 1].name if following else None
        changed = _set(nb, BADGES_TAG, "markdown", badges_source(url, path.name), 1)
        overview = 3 if len(nb.cells) > 2 else len(nb.cells)
        setup = setup_source(url, path.name)
        changed |= _set(nb, SETUP_TAG, "code", setup, overview, SETUP_METADATA)
        changed |= _set(nb, NEXT_TAG, "markdown", next_source(next_title, next_file), len(nb.cells))
        if changed:
            drifted.append(path.name)
            if not check:
                write(nb, path)
    return drifted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drift")
    args = parser.parse_args(argv)
    drifted = sync(check=args.check)
    verb = "drifted from pyproject.toml" if args.check else "updated"
    for name in drifted:
        print(f"{name}: {verb}")
    return 1 if (args.check and drifted) else 0


if __name__ == "__main__":
    sys.exit(main())
