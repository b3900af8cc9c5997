"""tools/torch_range.py without building an environment: which releases and notebooks it
runs, what it installs, the arguments it refuses, and the message texts it lets differ."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch_range
from course import ROOT, notebook_paths, read
from nbval.plugin import get_sanitize_patterns

from helpers.versions import TORCH_MINIMUMS, runs_on

PATTERNS = get_sanitize_patterns(torch_range.SANITIZER.read_text(encoding="utf-8"))
NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")  # a digit inside a name (Backward0) is no number
# What the older releases print, one sample per entry of the file (torch 2.3.0 and 2.4.0, 2.9.0
# for notebook 07; notebook 00's own verdict), with the numbers around the words.
OLDER_WORDING = [
    "If you access the non-leaf Tensor by mistake, make sure you access the leaf Tensor "
    "instead. See github.com/pytorch/pytorch/pull/30531 for more informations.",
    "[torch.FloatTensor [16, 1]], which is output 0 of AsStridedBackward0, is at version 2; "
    "expected version 1 instead.",
    "Hint: enable anomaly detection to find the operation that failed to compute its "
    "gradient, with torch.autograd.set_detect_anomaly(True).",
    "2 graphs, 1 graph break: ... Dynamo currently does not support tracing `Tensor.backward()`.",
    "The notebooks the [WARN] line names need a newer torch; the others run here.",
]


def sanitized(text: str) -> str:
    for regex, replace in PATTERNS:
        text = re.sub(regex, replace, text)
    return text


def committed_texts():
    for path in notebook_paths():
        for cell in read(path).cells:
            for output in cell.get("outputs", []):
                text = output.get("text") or output.get("data", {}).get("text/plain") or ""
                yield from [text, output.get("evalue", "")]


def test_each_entry_maps_its_older_wording_and_keeps_every_number():
    assert len(PATTERNS) == len(OLDER_WORDING) == 5
    for (regex, _), older in zip(PATTERNS, OLDER_WORDING, strict=True):
        assert re.search(regex, older), f"{regex} does not match what the release prints"
        assert sanitized(older) != older
        assert NUMBER.findall(sanitized(older)) == NUMBER.findall(older), older


def test_the_committed_outputs_come_out_of_the_mapping_unchanged():
    texts = list(committed_texts())
    assert len(texts) > 200
    assert [sanitized(text) for text in texts] == texts


def test_each_entry_maps_an_older_wording_that_a_release_prints_to_the_committed_one():
    committed = "\n".join(committed_texts())
    for regex, replace in PATTERNS:
        assert not re.search(regex, committed), f"{regex} is the committed wording"
        assert replace in committed, f"{replace!r} is not what the pinned torch prints"


def test_it_installs_what_the_notebooks_and_nbval_need_from_the_course_files_less_torch():
    course = torch_range.requirement_specs(ROOT / "requirements.txt", torch_range.COURSE_PACKAGES)
    tests = torch_range.requirement_specs(ROOT / "requirements-test.txt", torch_range.TEST_PACKAGES)
    assert [spec.split(">")[0] for spec in course] == ["jupyterlab", "matplotlib", "ipywidgets"]
    assert [spec.split(">")[0] for spec in tests] == [
        "pytest",
        "pytest-xdist",
        "nbval",
        "nbformat",
        "jupyter_client",
        "polib",
    ]
    assert not any(spec.startswith("torch") for spec in course + tests)
    with pytest.raises(ValueError, match=r"requirements\.txt names no nosuchpackage"):
        torch_range.requirement_specs(ROOT / "requirements.txt", ("nosuchpackage",))


def test_the_minimums_are_each_notebooks_oldest_torch_and_each_runs_its_own_notebooks(
    monkeypatch,
):
    seen = []
    monkeypatch.setattr(torch_range, "check", lambda *args: seen.append(args) or 0)
    assert torch_range.main(["minimums"]) == 0
    assert seen == [
        ("2.3.0", (3, 11), False, False, True),
        ("2.4.0", (3, 11), False, False, True),
        ("2.9.0", (3, 11), False, False, True),
    ]  # True: each minimum runs only the notebooks whose oldest torch it is
    assert runs_on("2.3.0") == ["00", "01", "02", "03", "04", "05", "06"]
    assert runs_on("2.4.0")[-2:] == ["07", "09"]
    assert runs_on("2.9.0") == [n[:2] for n in TORCH_MINIMUMS]
    seen.clear()
    assert torch_range.main(["newest", "--keep"]) == 0
    assert seen == [("2.15.0", (3, 12), True, True, False)]
    seen.clear()
    assert torch_range.main(["--torch", "2.6.0"]) == 0
    assert seen == [("2.6.0", (3, 11), False, False, False)]


def test_each_notebook_runs_on_its_own_minimum_and_every_notebook_on_the_newest():
    own = {
        torch: torch_range.notebooks_to_run(torch, own_minimum_only=True)
        for torch in ("2.3.0", "2.4.0", "2.9.0")
    }
    assert own["2.4.0"] == [
        "notebooks/07_accumulation_at_scale.ipynb",
        "notebooks/09_capstone.ipynb",
    ]
    assert own["2.9.0"] == ["notebooks/08_training_stacks.ipynb"]
    every = sorted(n for names in own.values() for n in names)
    assert every == [f"notebooks/{name}.ipynb" for name in sorted(TORCH_MINIMUMS)]
    assert every == sorted(torch_range.notebooks_to_run("2.15.0", own_minimum_only=False))
    assert torch_range.notebooks_to_run("2.4.0", own_minimum_only=False)[-2:] == own["2.4.0"]
    assert torch_range.notebooks_to_run("2.2.0", own_minimum_only=False) == []


def test_a_failed_release_fails_the_run(monkeypatch, capsys):
    monkeypatch.setattr(torch_range, "check", lambda torch, *_: 1 if torch == "2.4.0" else 0)
    assert torch_range.main(["minimums"]) == 1
    assert "torch_range: failed on torch 2.4.0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "name either minimums, newest, prepare, or --torch"),
        (["newest", "--torch", "2.6.0"], "name either minimums, newest, prepare, or --torch"),
        (["--torch", "latest"], "write a version as 2.9.0, got 'latest'"),
        (["oldest"], "invalid choice: 'oldest'"),
    ],
)
def test_bad_arguments_say_what_to_write(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        torch_range.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_release_whose_environment_cannot_be_made_fails_with_a_line_not_a_traceback(
    monkeypatch, capsys, tmp_path
):
    def no_python(version):
        raise SystemExit("torch_range: no python3.99 here: install Python 3.99")

    # check() deletes its environment's folder afterwards: here a temporary one, not the
    # build/venv-torch-2.9.0 that `prepare` may be making beside this test (CI does)
    monkeypatch.setattr(torch_range, "ROOT", tmp_path)
    monkeypatch.setattr(torch_range, "find_python", no_python)
    assert torch_range.check("2.9.0", (3, 99), newest=False, keep=False) == 1
    assert "no environment for torch 2.9.0: torch_range: no python3.99 here" in (
        capsys.readouterr().out
    )


def test_a_python_that_is_not_here_is_named():
    with pytest.raises(SystemExit, match=r"no python3\.99 here: install Python 3\.99"):
        torch_range.find_python((3, 99))


def test_prepare_makes_every_environment_and_marks_it_ready(monkeypatch, tmp_path):
    made = []

    def fake_make(folder, python, torch):
        folder.mkdir(parents=True)
        made.append((folder.name, torch))
        return folder / "bin" / "python"

    monkeypatch.setattr(torch_range, "ROOT", tmp_path)
    monkeypatch.setattr(torch_range, "find_python", lambda version: f"python{version}")
    monkeypatch.setattr(torch_range, "make_environment", fake_make)
    assert torch_range.main(["prepare"]) == 0
    assert [torch for _, torch in made] == ["2.3.0", "2.4.0", "2.9.0", "2.15.0"]
    ready = torch_range.ready_environment("2.15.0", (3, 12))
    assert ready == tmp_path / "build" / "venv-torch-2.15.0" / "bin" / "python"
    assert torch_range.ready_environment("2.15.0", (3, 11)) is None  # made for another Python
    assert torch_range.ready_environment("2.6.0", (3, 11)) is None  # never made


def test_a_check_uses_a_ready_environment_and_makes_one_that_is_not(monkeypatch, tmp_path):
    made, ran = [], []
    monkeypatch.setattr(torch_range, "ROOT", tmp_path)
    monkeypatch.setattr(torch_range, "SANITIZER", tmp_path / "tools" / "texts.cfg")
    monkeypatch.setattr(torch_range, "find_python", lambda version: "python")
    monkeypatch.setattr(
        torch_range, "make_environment", lambda folder, python, torch: made.append(torch) or "py"
    )

    class Done:
        returncode = 0

    monkeypatch.setattr(
        torch_range.subprocess, "run", lambda command, **kw: ran.append(command[0]) or Done()
    )
    folder = tmp_path / "build" / "venv-torch-2.4.0"
    folder.mkdir(parents=True)
    (folder / ".ready").write_text(torch_range.ready_mark("2.4.0", (3, 11)), encoding="utf-8")
    assert torch_range.check("2.4.0", (3, 11), newest=False, keep=False) == 0
    assert made == [] and ran == [str(folder / "bin" / "python")]
    assert not folder.exists()  # deleted after its tests, as a made one is
    assert torch_range.check("2.3.0", (3, 11), newest=False, keep=False) == 0
    assert made == ["2.3.0"] and ran[-1] == "py"


def test_an_environment_that_cannot_be_made_is_not_marked_ready(monkeypatch, tmp_path, capsys):
    def broken(folder, python, torch):
        folder.mkdir(parents=True)
        raise subprocess.CalledProcessError(1, ["pip"])

    monkeypatch.setattr(torch_range, "ROOT", tmp_path)
    monkeypatch.setattr(torch_range, "find_python", lambda version: "python")
    monkeypatch.setattr(torch_range, "make_environment", broken)
    assert torch_range.prepare("2.9.0", (3, 11)) == 1
    assert "no environment for torch 2.9.0" in capsys.readouterr().out
    assert torch_range.ready_environment("2.9.0", (3, 11)) is None
    assert not (tmp_path / "build" / "venv-torch-2.9.0").exists()
