"""The workshop kit: the guide and its Chinese edition follow the notebooks, the setup page and
hub link point at the course, the glossary's terms are the notebooks' own, and solutions can be
stripped into an instructor's copy that installs and runs on its own. Installing that copy in a
fresh virtual environment and running every notebook there takes about 2 minutes: marker
instructor_copy, a step of its own (python -m pytest -m instructor_copy). The course site has
tests of its own (tests/tools/test_site.py, tests/tools/test_site_browser.py)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import build_workshop
import hub_link
import minutes
import nbformat
import pytest
import strip_solutions
import translate_documents
from course import ROOT, cells_tagged, notebook_paths, read, repository_url, title
from run_notebooks import execute
from setuptools.config.pyprojecttoml import read_configuration
from simulate_binder import index_reachable
from translation import check_markdown, glossary_terms

NOTEBOOKS = notebook_paths()


def notebook_text(path: Path) -> str:
    return "\n".join(cell.source for cell in read(path).cells).lower()


# ------------------------------------------------------------------ the guide
@pytest.fixture(scope="module")
def english() -> list[build_workshop.Notebook]:
    return build_workshop.load_notebooks()


def test_the_committed_guide_is_what_the_notebooks_and_notes_make(english):
    assert build_workshop.drift(build_workshop.ENGLISH, build_workshop.guide(english)) == [], (
        "run: python tools/build_workshop.py"
    )


def test_the_committed_chinese_guide_is_what_the_chinese_notebooks_and_notes_make(english):
    """Until every notebook's Chinese notes are there (tests/tools/test_translate_documents.py
    fails while one is missing) the Chinese guide cannot be made and is not committed; from
    then on it is checked like the English one."""
    chinese = build_workshop.CHINESE
    missing = [p.name for p in NOTEBOOKS if not (chinese.notes / f"{p.stem}.md").exists()]
    if missing and not chinese.guide.exists():
        pytest.skip(f"no Chinese notes yet for {missing}: the Chinese guide is not made yet")
    notebooks = build_workshop.load_edition(chinese, english)
    text = build_workshop.guide(notebooks, chinese)
    assert build_workshop.drift(chinese, text) == [], "run: python tools/build_workshop.py"


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


# ------------------------------------------------------------------ the Chinese guide
ZH_NOTE = """<!-- Generated by tools/translate_notebooks.py build from workshop/notes/{stem}.md -->
### 学习者常问的问题

**问：{stem} 的第一个问题？** 答：{stem} 的回答。

### 现场编码建议
- {stem} 的现场编码建议。

### 学习者容易卡住的地方
- {stem} 容易卡住的地方。
"""


@pytest.fixture(scope="module")
def chinese_edition(tmp_path_factory) -> build_workshop.Edition:
    """The Chinese guide, written into a temporary folder from the Chinese notebooks and notes
    there: the committed Chinese notes, and for a notebook whose notes are not translated yet,
    notes of the three sections that name it."""
    folder = tmp_path_factory.mktemp("zh-guide")
    (folder / "notes").mkdir()
    for path in NOTEBOOKS:
        committed = build_workshop.CHINESE.notes / f"{path.stem}.md"
        text = (
            committed.read_text(encoding="utf-8")
            if committed.exists()
            else ZH_NOTE.format(stem=path.stem)
        )
        (folder / "notes" / f"{path.stem}.md").write_text(text, encoding="utf-8")
    return dataclasses.replace(
        build_workshop.CHINESE, guide=folder / "instructor-guide.md", notes=folder / "notes"
    )


@pytest.fixture(scope="module")
def chinese(english, chinese_edition) -> tuple[list[build_workshop.Notebook], str]:
    notebooks = build_workshop.load_edition(chinese_edition, english)
    return notebooks, build_workshop.guide(notebooks, chinese_edition)


def table_rows(guide: str) -> list[list[str]]:
    """The schedule's rows, each a list of its cells, without the header and the rule."""
    rows = [line for line in guide.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def numbers(line: str) -> list[str]:
    """The numbers of a line outside its links (a link's target has the notebook's number)."""
    return re.findall(r"\d+(?::\d+)?", re.sub(r"\]\([^)]*\)", "]", line))


def test_the_chinese_guide_has_the_english_schedule_and_minutes(english, chinese):
    notebooks, guide = chinese
    english_guide = build_workshop.guide(english)
    en_rows, zh_rows = table_rows(english_guide), table_rows(guide)
    assert len(zh_rows) == len(en_rows) > 15
    assert [row[:4] for row in zh_rows] == [row[:4] for row in en_rows]
    assert [row[4] for row in zh_rows].count("休息") == len(build_workshop.LIVE) - 1
    assert build_workshop.schedule(notebooks, "zh-CN") == [
        (*row[:4], zh[4]) for row, zh in zip(build_workshop.schedule(english), zh_rows, strict=True)
    ]

    def minute_lines(text: str, starts: tuple[str, ...]) -> list[list[str]]:
        return [numbers(line) for line in text.splitlines() if line.startswith(starts)]

    # the totals, each notebook's minutes, and each notebook's minutes of reading after it
    assert minute_lines(guide, ("按阅读模型", "日程共", "[打开 notebook]")) == minute_lines(
        english_guide, ("The course's main path", "That is", "[Open the notebook]")
    )
    after = [
        line for line in guide.splitlines() if line.startswith("- [") and line.endswith("分钟。")
    ]
    english_after = [
        line for line in english_guide.splitlines()
        if line.startswith("- [") and line.endswith(" minutes.")
    ]  # fmt: skip
    assert [numbers(line)[-1] for line in after] == [numbers(line)[-1] for line in english_after]
    assert len(after) == len(english_after) > 0


read_once = functools.cache(read)


def chinese_heading(path: Path, section: minutes.Section) -> str:
    """The heading of the Chinese notebook's cell with the id of ``section``'s heading cell."""
    english_cell = read_once(path).cells[section.first_cell]
    chinese_cells = read_once(path.parent / "zh-CN" / path.name).cells
    [cell] = [c for c in chinese_cells if c.id == english_cell.id]
    return minutes.HEADING.match(cell.source).group(2)


def test_the_chinese_guide_names_each_section_by_the_chinese_notebooks_heading(english, chinese):
    _, guide = chinese
    rows = [row for row in table_rows(guide) if row[2] or row[3]]
    by_number = {nb.number: nb for nb in english}
    live = [item for block in build_workshop.LIVE for item in block]
    assert len(rows) == len(live)
    for (number, start), row in zip(live, rows, strict=True):
        nb = by_number[number]
        [section] = [s for s in nb.sections if s.heading.startswith(start)]
        heading = chinese_heading(NOTEBOOKS[int(number)], section)
        assert row[4] == f"[{number}](../../notebooks/zh-CN/{nb.name}) {heading}"
        assert re.search("[\u4e00-\u9fff]", heading), heading
    for nb in english[1:]:  # the reading after it too: every section of the main path
        for section in nb.sections:
            if section.minutes >= 0.5 and section.heading not in build_workshop.FRAMING:
                assert chinese_heading(NOTEBOOKS[int(nb.number)], section) in guide


def test_the_chinese_guide_carries_the_chinese_notes_and_the_notebooks_own_words(
    chinese, chinese_edition
):
    notebooks, guide = chinese
    for nb, path in zip(notebooks, NOTEBOOKS, strict=True):
        note = (chinese_edition.notes / f"{path.stem}.md").read_text(encoding="utf-8")
        body = note.split("\n", 1)[1].strip()  # without the line that says it is generated
        assert body.replace("### ", "#### ") in guide, path.name
        zh = read(chinese_edition.notebooks / path.name)
        assert nb.title == title(zh) and f"\n### {nb.title}\n" in guide
        zh_text = "\n".join(cell.source for cell in zh.cells)
        for item in nb.objectives + nb.key_points:  # the Chinese notebook's own
            assert f"- {item}\n" in guide and item in zh_text, (path.name, item)
        assert nb.objectives and nb.key_points
    assert "Generated by" not in guide
    for english_words in ("minutes", "Open the notebook", "Break", "Objectives", "Key points"):
        assert english_words not in guide


def test_the_chinese_guide_links_to_the_chinese_notebooks_and_documents_that_exist(chinese):
    _, guide = chinese
    here = ROOT / build_workshop.CHINESE_GUIDE
    links = re.findall(r"\]\(([^)#]+)\)", guide)
    assert len(links) > 30
    for link in links:
        assert (here.parent / link).is_file(), link
        if link.endswith(".ipynb"):
            assert link.startswith("../../notebooks/zh-CN/"), link
    assert "English: [instructor-guide.md](../instructor-guide.md)" in guide.splitlines()[:6]
    for english in ("setup.md", "glossary.md"):
        chinese = ROOT / "workshop" / "zh-CN" / english
        assert f"]({english if chinese.exists() else '../' + english})" in guide


def test_check_fails_on_a_drifted_chinese_guide(english, chinese_edition, monkeypatch, capsys):
    monkeypatch.setattr(build_workshop, "EDITIONS", (chinese_edition,))
    monkeypatch.setattr(build_workshop, "load_notebooks", lambda: english)  # measured once
    assert build_workshop.main([]) == 0
    assert build_workshop.main(["--check"]) == 0
    guide = chinese_edition.guide
    guide.write_text(guide.read_text(encoding="utf-8").replace("休息", "茶歇"), encoding="utf-8")
    capsys.readouterr()
    assert build_workshop.main(["--check"]) == 1
    assert f"{guide} has drifted: run python tools/build_workshop.py" in capsys.readouterr().err
    guide.unlink()
    assert build_workshop.main(["--check"]) == 1
    assert build_workshop.main([]) == 0 and build_workshop.main(["--check"]) == 0


def test_a_missing_chinese_note_or_notebook_is_named_with_the_command_that_makes_it(
    english, chinese_edition, tmp_path, monkeypatch, capsys
):
    notes = tmp_path / "notes"
    shutil.copytree(chinese_edition.notes, notes)
    (notes / "04_several_losses.md").unlink()
    (notes / "07_accumulation_at_scale.md").unlink()
    edition = dataclasses.replace(chinese_edition, notes=notes, guide=tmp_path / "guide.md")
    notebooks = build_workshop.load_edition(edition, english)
    command = re.escape("run python tools/translate_notebooks.py build")
    with pytest.raises(
        FileNotFoundError, match=f"04_several_losses.md, .*07_accumulation_at_scale.md: .*{command}"
    ):
        build_workshop.guide(notebooks, edition)
    monkeypatch.setattr(build_workshop, "EDITIONS", (edition,))
    monkeypatch.setattr(build_workshop, "load_notebooks", lambda: english)
    assert build_workshop.main(["--check"]) == 1
    assert "notes/04_several_losses.md" in capsys.readouterr().err
    assert build_workshop.main([]) == 1 and not edition.guide.exists(), "nothing written"
    (tmp_path / "notebooks").mkdir()
    for path in NOTEBOOKS[:9]:  # no Chinese notebook 09
        shutil.copy(chinese_edition.notebooks / path.name, tmp_path / "notebooks")
    edition = dataclasses.replace(chinese_edition, notebooks=tmp_path / "notebooks")
    with pytest.raises(FileNotFoundError, match=rf"notebooks/09_capstone.ipynb: .*{command}"):
        build_workshop.load_edition(edition, english)


def test_a_chinese_notebook_or_note_that_is_not_the_english_ones_is_refused(
    english, chinese_edition, tmp_path
):
    words = build_workshop.WORDS["zh-CN"]
    nb = read(chinese_edition.notebooks / english[1].name)
    path = tmp_path / english[1].name
    section = build_workshop.live_sections(english[1])[0]
    nb.cells[section.first_cell].source = "计算图：叶子张量与非叶子张量"  # no longer a heading
    nbformat.write(nb, path)
    with pytest.raises(ValueError, match=rf"cell {nb.cells[section.first_cell].id}: .* no heading"):
        build_workshop.translated(english[1], path, words)
    del nb.cells[3]
    nbformat.write(nb, path)
    with pytest.raises(ValueError, match="lags behind the English; run python tools/translate"):
        build_workshop.translated(english[1], path, words)
    notes = tmp_path / "notes"
    shutil.copytree(chinese_edition.notes, notes)
    untranslated = (build_workshop.NOTES / "00_setup_check.md").read_text(encoding="utf-8")
    (notes / "00_setup_check.md").write_text(untranslated, encoding="utf-8")
    edition = dataclasses.replace(chinese_edition, notes=notes)
    with pytest.raises(ValueError, match=r"00_setup_check\.md must have exactly the sections"):
        build_workshop.guide(build_workshop.load_edition(edition, english), edition)


def test_the_chinese_guides_words_translate_the_english_ones_with_the_glossarys_terms():
    """Each of the guide's own words in Chinese, held to its English as a catalog's translation
    is (tools/translation.py): the same code spans and link targets, the glossary's terms."""
    english, chinese = build_workshop.WORDS["en"], build_workshop.WORDS["zh-CN"]
    assert english.keys() == chinese.keys()
    terms = glossary_terms()
    values = dict(teaching=240, exercises=176, hours=3, setup="setup.md", glossary="glossary.md",
                  used=175, total=180, left=5, notebooks="[00](x.ipynb)", title="00 · T",
                  link="x.ipynb", sections="1. A (3)", minutes=12, heading="1. A")  # fmt: skip
    for key, text in english.items():
        pairs = (
            zip(text, chinese[key], strict=True)
            if isinstance(text, tuple)
            else [(text, chinese[key])]
        )
        for en, zh in pairs:
            en, zh = en.format(**values), zh.format(**values)
            assert check_markdown(en, zh, terms) == [], (key, zh)
            assert en == zh or re.search("[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]", zh), key
    assert translate_documents.WRITTEN_ELSEWHERE[build_workshop.ENGLISH_GUIDE] == (
        build_workshop.CHINESE_GUIDE
    )
    with pytest.raises(ValueError, match="language must be one of en, zh-CN, not 'zh'"):
        build_workshop.schedule([], "zh")


# --------------------------------------------------------- setup page, hub link
def test_the_setup_page_points_at_the_course_and_uses_the_readme_commands():
    setup = (ROOT / "workshop" / "setup.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for url in re.findall(r"https://(?:github|colab|mybinder)[^\s>)]+", setup):
        owner_repo = repository_url().removeprefix("https://github.com/")
        assert owner_repo in url, url
    for command in (
        "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu",
        "python -m pip install -r requirements.txt -e ./loop_auditor -e . && jupyter lab "
        "--ServerApp.root_dir=. "
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
    chinese = "zh-CN/00_setup_check.ipynb"  # as the README and the setup page say
    query = parse_qs(urlparse(hub_link.hub_link("https://hub.example.edu", chinese)).query)
    assert query["urlpath"] == [f"lab/tree/{folder}/notebooks/{chinese}"]


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
def text_of(outputs: list) -> str:
    """What a cell's outputs show as plain text: streams and text/plain, errors by name."""
    parts = []
    for output in outputs:
        if output["output_type"] == "stream":
            parts.append(output["text"])
        elif output["output_type"] == "error":
            parts.append(f"{output['ename']}: {output['evalue']}")
        else:
            parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


# After the setup cell: where the kernel's Python and the course it imports come from.
WHERE_FROM = (
    "import json, sys, helpers, loop_auditor\n"
    "print(json.dumps([sys.executable, helpers.__file__, loop_auditor.__file__]))"
)


def run_stripped(
    path: Path, env: dict[str, str], last: str | None = None, **kwargs
) -> tuple[list[str], object]:
    """Execute a stripped notebook with WHERE_FROM after its setup cell (and ``last``, if
    given, as a last cell); return the paths WHERE_FROM printed, and the executed notebook
    without that cell. Raises if a cell errs."""
    nb = read(path)
    [setup] = cells_tagged(nb, "course-setup")
    nb.cells.insert(setup + 1, nbformat.v4.new_code_cell(WHERE_FROM))
    if last is not None:
        nb.cells.append(nbformat.v4.new_code_cell(last))
    execute(nb, path.parent, env=env, **kwargs)
    printed = [o["text"] for o in nb.cells.pop(setup + 1).outputs if o.get("name") == "stdout"]
    where = json.loads("".join(printed))
    return where, nb


def assert_unanswered(nb, original) -> None:
    """Every exercise cell of the original is there and its checker says "not yet": ✏️ Not
    answered yet where the learner writes the answer, ❌ Not yet with a hint where the cell
    holds a loop to repair; never ✅ Correct."""
    exercises = cells_tagged(nb, "exercise")
    assert len(exercises) == len(cells_tagged(read(original), "exercise"))
    for index in exercises:
        shown = text_of(nb.cells[index].outputs)
        assert "✏️ Not answered yet" in shown or "❌ Not yet" in shown, (original.name, index, shown)
        assert "✅ Correct" not in shown, (original.name, index, shown)


AUDITOR = "loop_auditor"  # the loop auditor's distribution: its folder
LOCAL_INSTALL = ["-e", f"./{AUDITOR}", "-e", "."]  # the README's: never loop-auditor from an index


def auditor_init(course: Path) -> str:
    """Where ``course``'s loop_auditor package starts: in its distribution's src/."""
    return str(course / AUDITOR / "src" / "loop_auditor" / "__init__.py")


def course_env(**extra: str) -> dict[str, str]:
    """This process's environment for a kernel or tool of the copy: without PYTHONPATH (it
    names this checkout) and strict checks, on the CPU, with ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GM_STRICT_CHECKS")}
    return dict(env, GM_DEVICE="cpu", **extra)


@pytest.fixture(scope="module")
def stripped(tmp_path_factory) -> tuple[Path, list[Path]]:
    course = tmp_path_factory.mktemp("stripped") / "course"
    return course, strip_solutions.strip_solutions(course)


def pyproject_packages() -> list[str]:
    """The packages ``pip install .`` installs, as setuptools itself reads pyproject.toml."""
    config = read_configuration(ROOT / "pyproject.toml", expand=True)
    return config["tool"]["setuptools"]["packages"]


def test_strip_solutions_writes_a_course_without_solutions(stripped):
    _, written = stripped
    assert [p.name for p in written] == [p.name for p in NOTEBOOKS]
    for original, path in zip(NOTEBOOKS, written, strict=True):
        nb = read(path)
        assert cells_tagged(nb, "solution") == []
        assert len(cells_tagged(nb, "exercise")) == len(cells_tagged(read(original), "exercise"))
        assert not any("Solution (click to reveal)" in c.source for c in nb.cells)


def test_the_copy_holds_what_pip_install_needs_and_no_tests_tools_or_notes(stripped):
    course, _ = stripped
    packages = pyproject_packages()
    for package in packages:
        folder = Path(*package.split("."))
        assert (course / folder / "__init__.py").is_file(), package
        assert sorted(p.name for p in (course / folder).glob("*.py")) == sorted(
            p.name for p in (ROOT / folder).glob("*.py")
        ), package
    # the loop auditor's distribution, whole: what `pip install -e ./loop_auditor` builds
    distributions = strip_solutions.local_distributions()
    assert distributions == [AUDITOR]
    for name in distributions:
        assert sorted(files_under(course / name)) == sorted(files_under(ROOT / name)), name
        assert (course / name / "pyproject.toml").is_file()
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "readme"
    ]
    tops = {package.split(".")[0] for package in packages}
    expected = {"pyproject.toml", readme, "requirements.txt", "binder", "notebooks", *tops}
    assert {p.name for p in course.iterdir()} == expected | set(distributions)
    assert not list(course.rglob("__pycache__"))
    assert not list(course.rglob("*.egg-info"))


def files_under(folder: Path) -> list[str]:
    """The files a copy of ``folder`` holds: none of what building or installing leaves."""
    left = ("__pycache__", "build", "dist")
    return [
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file()
        and not any(part in left or part.endswith(".egg-info") for part in p.parts)
        and p.suffix != ".pyc"
    ]


def test_the_copy_takes_each_distribution_of_the_repository_the_course_depends_on(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "course"\ndependencies = ["torch>=2.3", "Local_Tool==0.1"]\n'
    )
    for folder, name in (("tool", "local-tool"), ("other", "other-tool"), ("empty", None)):
        (tmp_path / folder).mkdir()
        if name:
            (tmp_path / folder / "pyproject.toml").write_text(f'[project]\nname = "{name}"\n')
    assert strip_solutions.local_distributions(tmp_path) == ["tool"]
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = [">=1"]\n')
    with pytest.raises(ValueError, match="a dependency without a name"):
        strip_solutions.local_distributions(tmp_path)


@pytest.mark.parametrize(
    ("setuptools", "folders"),
    [('packages = ["pkg", "pkg.sub", "other"]', ["pkg", "other"]),
     ('packages.find = {include = ["pkg*"]}', ["pkg"]),
     ('packages.find = {where = ["src"]}', ["src/lib"]),
     ('package-dir = {"" = "src"}', "package-dir"),
     ("py-modules = []", "names no packages")],
)  # fmt: skip
def test_the_copy_takes_the_packages_pyproject_lists_or_finds(tmp_path, setuptools, folders):
    for package in ("pkg", "pkg/sub", "other", "src/lib"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").touch()
    (tmp_path / "pyproject.toml").write_text(f"[tool.setuptools]\n{setuptools}\n")
    if isinstance(folders, str):
        with pytest.raises(ValueError, match=folders):
            strip_solutions.package_folders(tmp_path)
    else:
        assert strip_solutions.package_folders(tmp_path) == folders


# After the notebook: import every module of the copy's packages; print how many of those
# packages' modules are loaded and which of them are not the copy's files.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
for top in TOPS:
    for module in pkgutil.walk_packages(importlib.import_module(top).__path__, top + "."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
loaded = {n: m for n, m in sys.modules.items() if n.split(".")[0] in TOPS}
where = {n: m.__file__ or next(iter(getattr(m, "__path__", [])), "") for n, m in loaded.items()}
outside = sorted(n for n, w in where.items() if not w.startswith(COURSE))
print(json.dumps([len(loaded), outside]))
"""


def test_notebook_05_and_every_module_of_the_copy_run_from_the_copy_alone(stripped):
    """In a kernel whose PYTHONPATH is the copy's root (ahead of this checkout's editable
    install), the stripped notebook 05, which imports the loop auditor (helpers.audit) and runs
    in seconds, runs and its exercise says not answered; then every module of the packages
    pyproject lists imports, and each is the copy's file."""
    course, written = stripped
    [path] = [p for p in written if p.name.startswith("05_")]
    tops = sorted({package.split(".")[0] for package in pyproject_packages()} | {"loop_auditor"})
    paths = os.pathsep.join(map(str, (course / AUDITOR / "src", course)))
    env = course_env(PYTHONPATH=paths, PYTHONDONTWRITEBYTECODE="1")
    last = f"TOPS, COURSE = {tops!r}, {str(course) + os.sep!r}\n{IMPORT_ALL}"
    where, nb = run_stripped(path, env, last=last)
    assert where[1:] == [str(course / "helpers" / "__init__.py"), auditor_init(course)]
    [loaded, outside] = json.loads(text_of(nb.cells.pop().outputs))
    assert outside == []
    auditor_modules = len(list((ROOT / AUDITOR / "src" / "loop_auditor").glob("*.py"))) - 1
    # the packages and their modules, and every module of the loop auditor but __main__
    assert loaded >= len(pyproject_packages()) + 2 + auditor_modules
    assert_unanswered(nb, NOTEBOOKS[written.index(path)])


def test_the_hub_link_opens_each_notebook_of_the_copy_as_nbgitpuller_clones_it(stripped, tmp_path):
    """Pushed to a repository of its own and linked with hub_link.py --repo, the copy is
    cloned by nbgitpuller into the learner's home as a folder named after the repository;
    the link's branch must be one the copy has, and its path a notebook in that folder."""
    course, written = stripped
    repo = tmp_path / "repo"
    shutil.copytree(course, repo)
    git = ["git", "-c", "user.name=course", "-c", "user.email=course@example.invalid"]
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run([*git, *command], cwd=repo, check=True)
    home = tmp_path / "home"
    url = "https://github.com/someone/gradient-mechanics-workshop"
    for path in written:
        query = parse_qs(
            urlparse(hub_link.hub_link("https://hub.example.edu", path.name, url)).query
        )
        assert query["repo"] == [url]
        folder = home / url.rsplit("/", 1)[-1]
        if not folder.exists():
            subprocess.run(
                ["git", "clone", "-q", "--branch", *query["branch"], str(repo), str(folder)],
                check=True,
            )
        [urlpath] = query["urlpath"]
        assert urlpath.startswith("lab/tree/"), urlpath
        assert (home / urlpath.removeprefix("lab/tree/")).is_file(), urlpath
    assert (folder / "notebooks" / "00_setup_check.ipynb").is_file()


def test_strip_solutions_refuses_a_folder_with_files(tmp_path):
    (tmp_path / "something").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        strip_solutions.strip_solutions(tmp_path)


# ------------------------------------------- the instructor's copy, installed from scratch
KERNEL = "gm-instructor-copy"


@pytest.fixture(scope="module")
def installed_copy(tmp_path_factory) -> tuple[Path, list[Path], Path]:
    """The stripped course in a fresh virtual environment, installed the README's way: torch
    first (pinned by constraints.txt: here a local file; the copy compares no outputs, but any other
    torch would be a download), then ``pip install -r requirements.txt -e ./loop_auditor -e .`` in
    the copy (the loop auditor from its folder, never from an index); and a kernel spec of that
    environment. With no network, pip's retries of its index would take minutes per package: then
    pip tries once and takes what this machine's pip configuration finds locally (about 45 s either
    way here)."""
    base = tmp_path_factory.mktemp("instructor-copy")
    course, env_dir = base / "course", base / "env"
    written = strip_solutions.strip_solutions(course)
    python = str(env_dir / "bin" / "python")
    env = course_env()
    if not index_reachable(os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/")):
        env["PIP_RETRIES"] = "0"
    for command in (
        [sys.executable, "-m", "venv", str(env_dir)],
        [python, "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), "torch"],
        [python, "-m", "pip", "install", "-q", "-r", "requirements.txt", *LOCAL_INSTALL],
        [python, "-m", "ipykernel", "install", "--prefix", str(env_dir), "--name", KERNEL],
    ):
        done = subprocess.run(command, cwd=course, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return course, written, env_dir


@pytest.mark.instructor_copy
def test_the_installed_copy_is_the_course_and_has_the_loop_audit_command(installed_copy):
    course, _, env_dir = installed_copy
    where = subprocess.run(
        [env_dir / "bin" / "python", "-c",
         "import helpers, loop_auditor; print(helpers.__file__, loop_auditor.__file__)"],
        cwd=env_dir, env=course_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert where.stdout.split() == [str(course / "helpers" / "__init__.py"), auditor_init(course)]
    command = subprocess.run(
        [env_dir / "bin" / "loop-audit", "--help"], env=course_env(), capture_output=True
    )
    assert command.returncode == 0 and b"--accumulation-steps" in command.stdout


@pytest.mark.instructor_copy
@pytest.mark.parametrize("original", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_notebook_of_the_installed_copy_runs_and_no_exercise_is_answered(
    installed_copy, original, monkeypatch
):
    course, written, env_dir = installed_copy
    monkeypatch.setenv("JUPYTER_PATH", str(env_dir / "share" / "jupyter"))  # the kernel spec
    path = written[NOTEBOOKS.index(original)]
    env = course_env(PATH=f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}")
    where, nb = run_stripped(path, env, kernel_name=KERNEL)  # raises if a cell errs
    assert where == [
        str(env_dir / "bin" / "python"),
        str(course / "helpers" / "__init__.py"),
        auditor_init(course),
    ]
    assert_unanswered(nb, original)
    shown = text_of([output for cell in nb.cells for output in cell.get("outputs", [])])
    statuses = re.findall(r"^\[([A-Z]+)\] ", shown, flags=re.MULTILINE)  # notebook 00's report
    assert set(statuses) <= {"OK"}, shown


def test_find_counts_a_folder_by_its_subpackages_and_namespaces_false_needs_init(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "ns").mkdir()
    found = strip_solutions.top_level_found
    assert found(tmp_path, ["pkg.*"], []) == ["pkg"]  # only subpackages named: its folder
    assert found(tmp_path, ["*"], []) == ["ns", "pkg"]
    assert found(tmp_path, ["*"], [], namespaces=False) == ["pkg"]
    assert found(tmp_path, ["*"], ["ns"]) == ["pkg"]
