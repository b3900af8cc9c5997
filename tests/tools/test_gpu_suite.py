"""tools/gpu_suite.sh, the one command that runs the suite on the CUDA machine, and what it
depends on: the wheel list of tools/fetch_gpu_wheels.py is exactly what the suite needs less
what the machine has, the scripts parse, the skip list is right, the wheel check and the
failure report work, and the pytest plugin ends a run in time with its junit XML written."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path

import fetch_gpu_wheels as wheels
import gpu_suite_checks as checks
import pytest
from course import ROOT

SCRIPT = ROOT / "tools" / "gpu_suite.sh"


def bash_array(name: str) -> list[str]:
    """The words of ``NAME=( ... )`` in gpu_suite.sh, comments left out."""
    # Comments first (a comment may hold a parenthesis), then the array.
    script = re.sub(r"(^|\s)#[^\n]*", r"\1", SCRIPT.read_text(), flags=re.MULTILINE)
    match = re.search(rf"^{name}=\((.*?)\)", script, re.MULTILINE | re.DOTALL)
    assert match, f"gpu_suite.sh defines no {name}=(...)"
    return match.group(1).split()


def bash_value(name: str) -> str:
    match = re.search(rf"^{name}=(\S+)$", SCRIPT.read_text(), re.MULTILINE)
    assert match, f"gpu_suite.sh sets no {name}="
    return match.group(1)


# ------------------------------------------------------------------ what is fetched
def test_the_wheels_are_what_the_suite_needs_less_what_the_machine_has():
    closure = wheels.dependency_closure()
    machine = {wheels.normalize(name) for name in wheels.MACHINE_HAS}
    needed = set(closure) - machine
    assert set(wheels.WHEELS) - needed == set(), "fetched but not needed"
    assert needed - set(wheels.WHEELS) == set(), "needed but neither fetched nor on the machine"
    assert machine <= set(closure), "MACHINE_HAS names packages the suite does not need"
    assert all(wheels.normalize(name) == name for name in wheels.WHEELS)
    assert not [name for name in wheels.WHEELS if wheels.never_fetched(name)]


def top_level_imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def suite_sources() -> dict[str, str]:
    """The Python the GPU run executes: tests (less the skipped files), tools, helpers and
    every notebook's code cells."""
    skipped = {ROOT / path for path in bash_array("SKIP_FILES")}
    files = [*sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "tools").glob("*.py"))]
    files += sorted((ROOT / "helpers").rglob("*.py")) + sorted(
        (ROOT / "loop_auditor").rglob("*.py")
    )
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in files if p not in skipped}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        lines = [line for line in "\n".join(code).splitlines() if not line.startswith(("%", "!"))]
        sources[str(path.relative_to(ROOT))] = "\n".join(lines)
    return sources


def test_every_module_the_suite_imports_is_fetched_or_on_the_machine():
    # pip: the machine's own where it has one; gpu_suite.sh unpacks the wheels without it
    local = {"helpers", "loop_auditor", "tools", "pip"} | {
        p.stem for p in (ROOT / "tools").glob("*.py")
    }
    local |= {p.stem for p in (ROOT / "tests").rglob("*.py")}
    provided = set(wheels.dependency_closure())
    owners = metadata.packages_distributions()
    missing = {}
    for name, source in suite_sources().items():
        modules = top_level_imports(source)
        modules |= set(re.findall(r"""["']-m["'],\s*["']([\w]+)""", source))  # python -m X
        for module in modules - local - set(sys.stdlib_module_names):
            dists = {wheels.normalize(d) for d in owners.get(module, [])}
            if not dists & provided:
                missing.setdefault(module, []).append(name)
    for module in set(re.findall(r'"\$PY" -m (\w+)', SCRIPT.read_text())) - local:
        dists = {wheels.normalize(d) for d in owners.get(module, [])}
        if not dists & provided:
            missing.setdefault(module, []).append("tools/gpu_suite.sh")
    assert missing == {}, "imported, but in no fetched wheel and not on the CUDA machine"


def test_the_check_accepts_exactly_the_pinned_wheels(tmp_path):
    pins = {"nbval": "0.11.0", "jupyter-client": "8.10.0", "pyzmq": "27.3.0"}
    names = [
        "nbval-0.11.0-py2.py3-none-any.whl",
        "jupyter_client-8.10.0-py3-none-any.whl",
        "pyzmq-27.3.0-cp312-abi3-manylinux_2_26_x86_64.manylinux_2_28_x86_64.whl",
    ]
    for name in names:
        (tmp_path / name).touch()
    assert wheels.check(tmp_path, pins) == []
    (tmp_path / "nbval-0.10.0-py2.py3-none-any.whl").touch()
    (tmp_path / "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl").touch()
    (tmp_path / names[1]).unlink()
    (tmp_path / names[2]).unlink()
    (tmp_path / "pyzmq-27.3.0-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    problems = "\n".join(wheels.check(tmp_path, pins))
    assert "pins nbval==0.11.0" in problems
    assert "never install torch" in problems
    assert "jupyter-client==8.10.0: no wheel" in problems
    assert "pyzmq-27.3.0-cp311-cp311" in problems and "do not fit" in problems
    assert wheels.check(tmp_path / "nowhere", pins)[0].startswith(str(tmp_path / "nowhere"))


@pytest.mark.parametrize(
    ("filename", "fits"),
    [
        ("ruff-0.17.6-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("tornado-6.6.1-cp311-abi3-manylinux1_x86_64.manylinux_2_28_x86_64.whl", True),
        ("rpds_py-2026.9.1-cp312-cp312-manylinux_2_17_x86_64.whl", True),
        ("comm-0.2.3-py3-none-any.whl", True),
        ("rpds_py-2026.9.1-cp311-cp311-manylinux_2_17_x86_64.whl", False),
        ("rpds_py-2026.9.1-cp312-cp312-musllinux_1_2_x86_64.whl", False),
        ("rpds_py-2026.9.1-cp312-cp312-manylinux_2_17_aarch64.whl", False),
        ("rpds_py-2026.9.1-cp312-cp312-macosx_11_0_arm64.whl", False),
        ("tornado-6.6.1-cp313-abi3-manylinux_2_28_x86_64.whl", False),
    ],
)
def test_wheel_tags_must_fit_cpython_312_on_x86_64_linux(filename, fits):
    assert wheels.runs_on_target(wheels.parse_wheel(filename)) is fits


@pytest.mark.skipif(not (ROOT / ".whl").is_dir(), reason="no .whl/: not fetched here")
def test_the_fetched_wheels_are_the_pinned_ones():
    assert wheels.check(ROOT / ".whl") == []
    total = sum(path.stat().st_size for path in (ROOT / ".whl").glob("*.whl"))
    assert total < 60 * 2**20, "the device tool carries 64 MiB in all"


def test_the_download_is_binary_only_without_dependencies_for_312():
    command = wheels.pip_download_command(Path("/tmp/w"), python="python3")
    assert command[:5] == ["python3", "-m", "pip", "download", "--no-deps"]
    assert "--only-binary=:all:" in command and "3.12" in command
    pins = [arg for arg in command if "==" in arg]
    assert pins == [f"{name}=={version}" for name, version in sorted(wheels.WHEELS.items())]


# ------------------------------------------------------------------ the script
def test_the_script_parses_and_stops_on_errors():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash")
    done = subprocess.run([bash, "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "\nset -euo pipefail\n" in SCRIPT.read_text()


def test_the_script_refuses_a_bad_argument_or_scratch_folder_before_doing_anything(tmp_path):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash")
    env = dict(os.environ, OUT=str(tmp_path / "out"))
    bad = subprocess.run([bash, str(SCRIPT), "--gpu"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "usage: bash tools/gpu_suite.sh [--cpu-dry-run]" in bad.stderr
    env["GM_SITE"] = "/nonexistent-gm-site"  # not under /tmp/: the script empties it first
    done = subprocess.run([bash, str(SCRIPT)], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "must be folders under /tmp" in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_script_installs_what_the_fetcher_fetched_and_checks_it_first():
    text = SCRIPT.read_text()
    assert bash_value("WHEEL_DIR") == wheels.DEST.relative_to(ROOT).as_posix() == ".whl"
    assert "/.whl/" in (ROOT / ".gitignore").read_text().splitlines()
    assert bash_array("TARGET_PLATFORMS") == list(wheels.PLATFORMS)
    check = text.index('tools/fetch_gpu_wheels.py --check "$WHEEL_DIR"')
    install = text.index("pip install -q --no-index --no-deps --no-compile --no-cache-dir")
    assert check < install < text.index("-m pytest")
    assert '"$WHEEL_DIR"/*.whl' in text


NEEDS_WHAT_THE_MACHINE_LACKS = re.compile(
    r"selenium|chromedriver|GM_IPYWIDGETS7|ipywidgets7|simulate_binder|urllib\.request|urlopen"
    r"|\bnpm\b"  # the site's bundled scripts
    r"|\"-m\", \"build\""  # python -m build: the loop auditor's distribution, built from PyPI
    # frameworks the suite does not carry:
    r"|importorskip\(\"(accelerate|lightning|transformers)\"\)"
)


def test_the_skip_list_is_exactly_the_test_files_that_need_what_the_machine_lacks():
    skipped = bash_array("SKIP_FILES")
    assert skipped and all((ROOT / path).is_file() for path in skipped)
    needing = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if path != Path(__file__) and NEEDS_WHAT_THE_MACHINE_LACKS.search(path.read_text())
    }
    assert set(skipped) == needing
    dry_run = bash_array("DRY_RUN_TESTS")
    assert dry_run and all((ROOT / path).exists() for path in dry_run)
    assert not set(dry_run) & set(skipped)


# ------------------------------------------------------------------ the checks and report
def test_deps_names_requirements_this_environment_does_not_meet(tmp_path):
    info = tmp_path / "fake_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fake-pkg\nVersion: 1.0\n"
        "Requires-Dist: pytest>=1\nRequires-Dist: no-such-package-gm>=1\n"
        "Requires-Dist: pytest<1\nRequires-Dist: other-gm; extra == 'docs'\n"
    )
    problems = checks.check_deps(tmp_path)
    assert len(problems) == 2
    assert "no-such-package-gm>=1: not installed" in problems[0]
    assert "pytest<1" in problems[1] and f"pytest {pytest.__version__} here" in problems[1]


def test_unpack_installs_a_wheel_without_pip(tmp_path):
    import zipfile

    wheel = tmp_path / "demo_gm-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("demo_gm/__init__.py", "VALUE = 42\n")
        archive.writestr("demo_gm-1.0.dist-info/METADATA", "Name: demo-gm\nVersion: 1.0\n")
        archive.writestr("demo_gm-1.0.data/purelib/demo_gm_extra.py", "EXTRA = 1\n")
        archive.writestr("demo_gm-1.0.data/scripts/demo-gm", "#!python\n")
    site = tmp_path / "site"
    checks.unpack(site, [wheel])
    found = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.is_file())
    assert found == [
        "bin/demo-gm",
        "demo_gm-1.0.dist-info/METADATA",
        "demo_gm/__init__.py",
        "demo_gm_extra.py",
    ]
    assert os.access(site / "bin" / "demo-gm", os.X_OK)
    done = subprocess.run(
        [sys.executable, "-c", "import demo_gm, demo_gm_extra; print(demo_gm.VALUE)"],
        env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True, text=True,
    )  # fmt: skip
    assert done.stdout.strip() == "42"


def junit(tmp_path, cases: str) -> Path:
    path = tmp_path / "junit.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    return path


def test_the_report_lists_the_failed_nbval_cells_and_where_they_are(tmp_path, capsys):
    notebook = ROOT / "notebooks" / "03_gradient_accumulation.ipynb"
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    code = [i for i, cell in enumerate(cells) if cell["cell_type"] == "code"]
    first_line = "".join(cells[code[5]]["source"]).strip().splitlines()[0]
    path = junit(
        tmp_path,
        '<testcase classname="notebooks.03_gradient_accumulation.ipynb" name="Cell 4"/>'
        '<testcase classname="notebooks.03_gradient_accumulation.ipynb" name="Cell 5">'
        '<failure message="#x1B[91mCell outputs differ#x1B[0m">expected 0.25, got 0.2500001'
        "</failure></testcase>"
        '<testcase classname="tests.core.test_memory" name="test_bad_input" time="2.5">'
        '<failure message="AssertionError: no">trace</failure></testcase>'
        '<testcase classname="tests.core.test_device" name="test_x"><skipped message="no"/>'
        "</testcase>",
    )
    assert checks.report(path, tmp_path / "out") == 1
    printed = capsys.readouterr().out
    assert "report: 2 failed, 1 passed, 1 skipped" in printed
    assert "FAILED tests/core/test_memory.py::test_bad_input: AssertionError: no" in printed
    cell = "notebooks/03_gradient_accumulation.ipynb::Cell 5"
    assert f"FAILED {cell}: Cell outputs differ\n" in printed  # without nbval's colours
    assert f"{cell}  (notebook cell {code[5]}, " in printed and first_line in printed
    assert "expected 0.25, got 0.2500001" in printed
    assert (tmp_path / "out" / "failed-cells.txt").read_text() == f"{cell}\n"
    assert (tmp_path / "out" / "failed-tests.txt").read_text().splitlines() == [
        cell,
        "tests/core/test_memory.py::test_bad_input",
    ]


def test_the_report_passes_a_clean_run_and_fails_a_missing_one(tmp_path, capsys):
    clean = junit(tmp_path, '<testcase classname="tests.core.test_device" name="test_x"/>')
    assert checks.report(clean, None) == 0
    assert checks.report(tmp_path / "none.xml", None) == 1
    assert "no junit XML" in capsys.readouterr().out


# ------------------------------------------------------------------ the plugin
# Each run is pytest with the plugin on a small test file. The three runs mostly sleep, so they
# are started together, once, and each test reads its own. Their timing holds under any load:
# every test that must start does so within DEADLINE_S of the session's start (collecting one
# small file takes milliseconds), and whatever must start late waits past it first.
DEADLINE_S = 2
PLUGIN_RUNS = {
    # test_slow is ended by the timeout after the deadline (3 s > 2 s): test_late never starts
    "timeout": (
        """
        import time
        def test_quick(): pass
        def test_slow(): time.sleep(60)
        def test_late(): pass
        """,
        ["--gm-test-timeout=3", f"--gm-deadline={DEADLINE_S}"],
    ),
    "deadline": (
        """
        import time
        def test_first(): time.sleep(3)
        def test_second(): pass
        """,
        [f"--gm-deadline={DEADLINE_S}"],
    ),
    # SIGTERM is sent once test_hangs has made the file "started" (so test_first has ended)
    "sigterm": (
        """
        import pathlib, time
        def test_first(): pass
        def test_hangs():
            pathlib.Path({started!r}).touch()
            time.sleep(60)
        """,
        [],
    ),
}


def start_pytest(folder: Path, tests: str, options: list[str]) -> subprocess.Popen:
    """pytest with the plugin on ``tests`` in ``folder``; its output goes to folder/output.
    Other plugins are not loaded: this tests the plugin, and pytest starts in 0.5 s, not 3 s."""
    (folder / "test_small.py").write_text(textwrap.dedent(tests))
    (folder / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-p", "gpu_suite_plugin", "-p", "no:cacheprovider"]
    command += ["-c", str(folder / "pytest.ini"), f"--junitxml={folder / 'j.xml'}"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    with open(folder / "output", "w") as output:
        return subprocess.Popen(
            [*command, *options, "test_small.py"], cwd=folder, env=env,
            stdout=output, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip


@pytest.fixture(scope="module")
def plugin_runs(tmp_path_factory) -> dict[str, tuple[int, list[dict] | None, str]]:
    """Each of PLUGIN_RUNS: (exit status, junit cases or None without a junit XML, output)."""
    folders = {name: tmp_path_factory.mktemp(f"plugin_{name}") for name in PLUGIN_RUNS}
    started = folders["sigterm"] / "started"
    processes = {}
    try:
        for name, (tests, options) in PLUGIN_RUNS.items():
            source = tests.replace("{started!r}", repr(str(started)))
            processes[name] = start_pytest(folders[name], source, options)
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        processes["sigterm"].send_signal(signal.SIGTERM)
        runs = {}
        for name, process in processes.items():
            rc = process.wait(timeout=120)
            junit_xml = folders[name] / "j.xml"
            cases = checks.read_junit(junit_xml) if junit_xml.exists() else None
            runs[name] = (rc, cases, (folders[name] / "output").read_text())
        return runs
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_test_over_its_time_fails_and_none_starts_after_the_deadline(plugin_runs):
    rc, cases, output = plugin_runs["timeout"]
    outcomes = {case["name"]: (case["outcome"], case["message"]) for case in cases}
    assert outcomes["test_quick"][0] == "passed"
    assert outcomes["test_slow"][0] == "failed" and "gm-test-timeout" in outcomes["test_slow"][1]
    assert outcomes["test_late"][0] == "skipped"
    assert outcomes["test_late"][1].startswith("gm-deadline: the suite's time ran out")
    assert rc == 1 and "gm-deadline: 1 tests did not run" in output


def test_a_deadline_skip_alone_still_fails_the_run(plugin_runs):
    rc, cases, _ = plugin_runs["deadline"]
    assert [case["outcome"] for case in cases] == ["passed", "skipped"]
    assert rc == 1


def test_sigterm_interrupts_the_run_and_the_junit_xml_is_still_written(plugin_runs):
    rc, cases, output = plugin_runs["sigterm"]
    assert rc == pytest.ExitCode.INTERRUPTED, output
    assert cases is not None and [case["name"] for case in cases][:1] == ["test_first"]
