"""The workshop kit: the guide follows the notebooks, the setup page and hub link point at the
course, the glossary's terms are the notebooks' own, and solutions can be stripped into an
instructor's copy that installs and runs on its own. Installing that copy in a fresh virtual
environment and running every notebook there takes about 2 minutes: marker instructor_copy,
a step of its own (python -m pytest -m instructor_copy). The course site has tests of its own
(tests/tools/test_site.py, tests/tools/test_site_browser.py)."""

from __future__ import annotations

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
import nbformat
import pytest
import strip_solutions
from course import ROOT, cells_tagged, notebook_paths, read, repository_url
from run_notebooks import execute
from setuptools.config.pyprojecttoml import read_configuration
from simulate_binder import index_reachable

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
