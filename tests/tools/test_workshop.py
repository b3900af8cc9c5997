"""The workshop kit: the guide follows the notebooks, the setup page and hub link point at the
course, the glossary's terms are the notebooks' own, and solutions can be stripped. The course
site has tests of its own (tests/tools/test_site.py, tests/tools/test_site_browser.py)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import build_workshop
import hub_link
import pytest
import strip_solutions
from course import ROOT, cells_tagged, notebook_paths, read, repository_url
from run_notebooks import execute

NOTEBOOKS = notebook_paths()


def notebook_text(path: Path) -> str:
    return "\n".join(cell.source for cell in read(path).cells).lower()


# ------------------------------------------------------------------ the guide
def test_the_committed_guide_is_what_the_notebooks_and_notes_make():
    assert build_workshop.main(["--check"]) == 0, "run: python tools/build_workshop.py"


def test_the_schedule_times_each_live_section_by_the_reading_model_and_fits():
    notebooks = build_workshop.load_notebooks()
    rows = build_workshop.schedule(notebooks)
    by_number = {nb.number: nb for nb in notebooks}
    expected = []
    for block in build_workshop.LIVE:
        for number, start in block:
            [section] = [s for s in by_number[number].sections if s.heading.startswith(start)]
            assert not section.going_deeper
            expected.append(build_workshop.section_minutes(section))
    taught = [row for row in rows if row[2] or row[3]]
    assert [(r[2], r[3]) for r in taught] == expected
    assert sum(1 for row in rows if row[4] == "Break") == len(build_workshop.LIVE) - 1
    end = rows[-1][1]
    hours, minutes = map(int, end.split(":"))
    assert rows[0][0] == "0:00" and hours * 60 + minutes <= build_workshop.WORKSHOP_MINUTES
    for (_, end_a, *_), (start_b, *_) in itertools.pairwise(rows):
        assert end_a == start_b, "the schedule has no gaps or overlaps"


def test_every_main_path_section_is_taught_live_or_named_as_reading_after():
    notebooks = build_workshop.load_notebooks()
    guide = build_workshop.guide(notebooks)
    for nb in notebooks[1:]:
        for section in nb.sections:
            if section.minutes >= 0.5 and section.heading not in build_workshop.FRAMING:
                assert section.heading in guide, (nb.name, section.heading)


def test_a_plan_that_overruns_is_refused(monkeypatch):
    notebooks = build_workshop.load_notebooks()
    everything = tuple((nb.number, s.heading) for nb in notebooks[1:5] for s in nb.sections)
    monkeypatch.setattr(build_workshop, "LIVE", (everything,))
    with pytest.raises(ValueError, match="more than 180"):
        build_workshop.schedule(notebooks)


@pytest.mark.parametrize("live", [((("01", "99. No such section"),),), ((("42", "1."),),)])
def test_a_plan_naming_no_main_path_section_is_refused(monkeypatch, live):
    monkeypatch.setattr(build_workshop, "LIVE", live)
    with pytest.raises(ValueError, match=r"LIVE names|do not exist"):
        build_workshop.schedule(build_workshop.load_notebooks())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_notebook_has_instructor_notes(path):
    notes = (build_workshop.NOTES / f"{path.stem}.md").read_text(encoding="utf-8")
    sections = re.split(r"^### ", notes, flags=re.MULTILINE)[1:]
    assert [s.splitlines()[0] for s in sections] == [
        h.removeprefix("### ") for h in build_workshop.NOTE_HEADINGS
    ]
    questions, tips, stuck = sections
    assert 3 <= questions.count("**Q:") <= 6 and questions.count("**Q:") == questions.count("A:")
    assert 3 <= tips.count("\n- ") <= 6 and 3 <= stuck.count("\n- ") <= 6


def test_the_guide_carries_each_notebooks_key_points():
    guide = build_workshop.GUIDE.read_text(encoding="utf-8")
    for nb in build_workshop.load_notebooks():
        assert nb.key_points and all(point in guide for point in nb.key_points)


# --------------------------------------------------------- setup page, hub link
def test_the_setup_page_points_at_the_course_and_uses_the_readme_commands():
    setup = (ROOT / "workshop" / "setup.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for url in re.findall(r"https://(?:github|colab|mybinder)[^\s>)]+", setup):
        owner_repo = repository_url().removeprefix("https://github.com/")
        assert owner_repo in url, url
    for command in (
        "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu",
        "python -m pip install -r requirements.txt -e . && jupyter lab --ServerApp.root_dir=. "
        "notebooks/00_setup_check.ipynb",
    ):
        assert command in setup and command in readme
    assert "workshop/setup.md" in readme and "workshop/instructor-guide.md" in readme


def test_hub_link_is_an_nbgitpuller_link_to_the_notebook(capsys):
    link = hub_link.hub_link("https://hub.example.edu/", "05_pitfalls.ipynb")
    parsed = urlparse(link)
    assert (parsed.netloc, parsed.path) == ("hub.example.edu", "/hub/user-redirect/git-pull")
    query = parse_qs(parsed.query)
    folder = repository_url().rsplit("/", 1)[-1]
    assert query == {
        "repo": [repository_url()],
        "branch": ["main"],
        "urlpath": [f"lab/tree/{folder}/notebooks/05_pitfalls.ipynb"],
    }
    assert hub_link.main(["https://hub.example.edu"]) == 0
    assert "00_setup_check.ipynb" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("hub", "notebook", "match"),
    [("hub.example.edu", "00_setup_check.ipynb", "hub's address"),
     ("https://hub.example.edu", "99_nothing.ipynb", "no notebook")],
)  # fmt: skip
def test_hub_link_refuses_bad_input(hub, notebook, match):
    with pytest.raises(ValueError, match=match):
        hub_link.hub_link(hub, notebook)


# ------------------------------------------------------------------ glossary
def glossary_entries() -> list[tuple[str, str]]:
    text = (ROOT / "workshop" / "glossary.md").read_text(encoding="utf-8")
    return re.findall(r"^\*\*(.+?)\*\*: .+ Notebook (\d\d)\.$", text, flags=re.MULTILINE)


def uses(text: str, term: str) -> bool:
    """The term, or its plural, as a word of the lowercased text: "gan" is not in "began"."""
    return re.search(rf"(?<![\w-]){re.escape(term.lower())}(?:e?s)?(?![\w-])", text) is not None


def test_glossary_terms_are_sorted_and_first_used_where_it_says():
    entries = glossary_entries()
    assert len(entries) >= 25
    terms = [term for term, _ in entries]
    assert terms == sorted(terms, key=str.lower)
    texts = {path.name[:2]: notebook_text(path) for path in NOTEBOOKS}
    for term, number in entries:
        first = next((n for n, text in texts.items() if uses(text, term)), None)
        assert first == number, f"{term!r}: first used in notebook {first}, glossary says {number}"


# ------------------------------------------------------------------ solutions
def test_strip_solutions_writes_a_working_course_without_solutions(tmp_path):
    written = strip_solutions.strip_solutions(tmp_path / "course")
    assert [p.name for p in written] == [p.name for p in NOTEBOOKS]
    assert (tmp_path / "course" / "helpers" / "audit.py").exists()
    for original, stripped in zip(NOTEBOOKS, written, strict=True):
        nb = read(stripped)
        assert cells_tagged(nb, "solution") == []
        assert len(cells_tagged(nb, "exercise")) == len(cells_tagged(read(original), "exercise"))
        assert not any("Solution (click to reveal)" in c.source for c in nb.cells)
    nb = read(written[5])  # 05 runs in seconds; its exercises answer "not yet"
    execute(nb, written[5].parent)
    outputs = [o for i in cells_tagged(nb, "exercise") for o in nb.cells[i].outputs]
    assert outputs and all("Not answered yet" in o["data"]["text/plain"] for o in outputs)


def test_strip_solutions_refuses_a_folder_with_files(tmp_path):
    (tmp_path / "something").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        strip_solutions.strip_solutions(tmp_path)
