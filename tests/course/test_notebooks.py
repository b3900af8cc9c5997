"""Every notebook: valid, run in order in one kernel, clean outputs, the course's anatomy,
in sync with the repository URL."""

from __future__ import annotations

import json
import re

import build_site
import nbformat
import pytest
import sync_notebooks
from course import ROOT, cells_tagged, chinese_notebook_paths, notebook_paths, read, title

NOTEBOOKS = notebook_paths()
# An absolute path of some machine: a Unix root folder, site-packages, or a Windows drive.
MACHINE_PATH = re.compile(
    r"(?<![\w.])/(?:home|root|usr|tmp|var|opt|Users|private|mnt|srv|work|Library)/"
    r"|site-packages|dist-packages|\b[A-Za-z]:\\\\"
)
NAMES = [path.name for path in NOTEBOOKS]
# The hygiene checks hold for the Chinese edition's notebooks too (run by the same runner).
EVERY_EDITION = [*NOTEBOOKS, *chinese_notebook_paths()]
EVERY_EDITION_IDS = [str(path.relative_to(ROOT / "notebooks")) for path in EVERY_EDITION]
SYLLABUS_PREFIXES = [f"{n:02d}_" for n in range(10)]


def test_the_course_starts_with_the_setup_check_and_follows_the_syllabus():
    assert NAMES[:2] == ["00_setup_check.ipynb", "01_autograd_accumulates.ipynb"]
    assert [name[:3] for name in NAMES] == SYLLABUS_PREFIXES[: len(NAMES)]


def code_cells(nb):
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def tags(cell):
    return cell.get("metadata", {}).get("tags", [])


@pytest.mark.parametrize("path", EVERY_EDITION, ids=EVERY_EDITION_IDS)
class TestHygiene:
    def test_is_valid_nbformat_under_one_megabyte(self, path):
        nbformat.validate(nbformat.read(path, as_version=4))
        assert path.stat().st_size < 1_000_000

    def test_code_cells_ran_in_order_in_one_fresh_kernel(self, path):
        counts = [cell.execution_count for cell in code_cells(read(path))]
        assert counts == list(range(1, len(counts) + 1))

    def test_no_errors_except_in_cells_marked_to_raise(self, path):
        for cell in code_cells(read(path)):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert not errors or "raises-exception" in tags(cell), cell.source

    def test_no_stderr_and_no_memory_addresses(self, path):
        for cell in code_cells(read(path)):
            for output in cell.outputs:
                assert output.get("name") != "stderr", f"stderr stored: {output.get('text')}"
                text = str(output.get("text", "")) + str(
                    output.get("data", {}).get("text/plain", "")
                )
                assert not re.search(r"0x[0-9a-fA-F]{6,}", text), text

    def test_no_machine_paths_or_tracebacks_in_outputs(self, path):
        for cell in code_cells(read(path)):
            for output in cell.outputs:
                text = json.dumps(output)
                found = MACHINE_PATH.search(text)
                assert found is None, f"a machine's path {found.group(0)!r} in: {text[:300]}"
                if output.output_type == "error":
                    assert output.traceback == [f"{output.ename}: {output.evalue}"]

    def test_ignored_outputs_are_followed_by_an_assertion(self, path):
        cells = code_cells(read(path))
        for index, cell in enumerate(cells):
            if "nbval-ignore-output" in tags(cell):
                nearby = cell.source + "".join(c.source for c in cells[index + 1 : index + 3])
                assert "assert" in nearby or "check(" in nearby, (
                    f"an ignored cell's property is not asserted: {cell.source}"
                )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
class TestAnatomy:
    def test_title_names_the_notebook(self, path):
        number = path.name[:2]
        assert re.fullmatch(rf"{number} · \S.+", title(read(path)))

    def test_badges_follow_the_title(self, path):
        nb = read(path)
        assert cells_tagged(nb, sync_notebooks.BADGES_TAG) == [1]
        badges = nb.cells[1].source
        assert "[Open in Colab](" in badges and "[Launch Binder](" in badges
        assert badges.count(path.name) == 2
        assert "![" not in badges, "text links: a badge image shows as broken alt text offline"

    def test_overview_has_questions_objectives_and_minutes(self, path):
        nb = read(path)
        [index] = cells_tagged(nb, "course-overview")
        overview = nb.cells[index].source
        assert "**Questions**" in overview and "**Objectives**" in overview
        assert re.search(r"\*\*Minutes:\*\* \d+ teaching / \d+ exercises", overview)

    def test_setup_cell_is_the_first_code_cell(self, path):
        nb = read(path)
        first = code_cells(nb)[0]
        assert sync_notebooks.SETUP_TAG in tags(first)
        assert first.outputs == [], "the setup cell must print nothing outside Colab"

    def test_setup_cell_is_folded_in_jupyterlab_and_a_form_on_colab(self, path):
        [index] = cells_tagged(read(path), sync_notebooks.SETUP_TAG)
        cell = read(path).cells[index]
        assert cell.metadata["jupyter"]["source_hidden"] is True, "folded in JupyterLab"
        assert cell.metadata["cellView"] == "form", "a form on Colab"
        title_line = cell.source.splitlines()[0]
        assert re.fullmatch(r'# @title Course setup\b.+ \{ display-mode: "form" \}', title_line)

    def test_sections_are_short(self, path):
        for cell in read(path).cells:
            if cell.cell_type == "code" and sync_notebooks.SETUP_TAG not in tags(cell):
                assert cell.source.count("\n") < 25, f"split this cell: {cell.source[:80]}"

    def test_every_exercise_is_checked_and_has_a_hidden_solution(self, path):
        nb = read(path)
        exercises = cells_tagged(nb, "exercise")
        assert exercises, "every notebook has at least one exercise"
        for index in exercises:
            assert re.search(r"check_\w+\(", nb.cells[index].source)
            solution = nb.cells[index + 1]
            assert "solution" in tags(solution)
            assert solution.source.startswith("<details><summary>Solution")
            assert "```python" in solution.source

    def test_key_points_then_a_link_to_the_next_notebook(self, path):
        nb = read(path)
        assert nb.cells[-2].source.startswith("## Key points")
        assert cells_tagged(nb, sync_notebooks.NEXT_TAG) == [len(nb.cells) - 1]
        position = NAMES.index(path.name)
        link = nb.cells[-1].source
        if position + 1 < len(NAMES):
            assert f"]({NAMES[position + 1]})" in link
        else:
            assert "last notebook" in link


GLOSSARY = ROOT / "workshop" / "glossary.md"
GLOSSARY_LINK = re.compile(r"\]\(\.\./workshop/glossary\.md(?:#([^)]*))?\)")
# Pull-request and issue numbers, and version history, belong in the Sources list.
HISTORY = re.compile(r"\b(?:PR|pull request|issue) #?\d+|/(?:pull|issues)/\d+|(?<![\w/])#\d{3,}\b")


def learner_code_cells(nb):
    """Code cells a learner reads: all but the setup cell (tooling, folded)."""
    return [c for c in code_cells(nb) if sync_notebooks.SETUP_TAG not in tags(c)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
class TestForTheLearner:
    def test_claims_are_checks_that_print_not_bare_asserts(self, path):
        for cell in learner_code_cells(read(path)):
            for line in cell.source.splitlines():
                assert not line.lstrip().startswith("assert "), f"use check(...): {line}"
                assert "fmt: skip" not in line and "noqa" not in line, line

    def test_glossary_links_name_an_entry(self, path):
        entries = {
            build_site.github_slug(term)
            for term in re.findall(r"^\*\*(.+?)\*\*:", GLOSSARY.read_text("utf-8"), re.MULTILINE)
        }
        for cell in read(path).cells:
            if cell.cell_type == "markdown":
                for slug in GLOSSARY_LINK.findall(cell.source):
                    assert not slug or slug in entries, f"no glossary entry #{slug}"

    def test_history_sits_in_the_sources_list_before_the_key_points(self, path):
        nb = read(path)
        sources = [i for i, c in enumerate(nb.cells) if c.source.startswith("## Sources")]
        assert sources in ([], [len(nb.cells) - 3]), "## Sources comes just before Key points"
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown" and index not in sources:
                found = HISTORY.search(cell.source)
                assert found is None, f"cell {index}: move {found.group(0)!r} to ## Sources"


def test_badges_setup_cells_and_links_match_the_repository_url():
    drifted = sync_notebooks.sync(check=True)
    assert drifted == [], "run: python tools/sync_notebooks.py"


def test_setup_cell_reads_the_one_url_setting():
    url = sync_notebooks.repository_url()
    cell = sync_notebooks.setup_source(url, "02_zero_grad_internals.ipynb")
    assert f'URL = "{url}"' in cell
    assert "torch" not in cell.split("lacking = ")[1].split("]")[0], "never install torch on Colab"
