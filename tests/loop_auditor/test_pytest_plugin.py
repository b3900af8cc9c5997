"""The ``loop_audit`` fixture (loop_auditor/src/loop_auditor/pytest_plugin.py), run as a
practitioner runs it: pytester writes a user's test file into a temporary folder and runs
pytest on it, in this process. The plugin is loaded with ``-p loop_auditor.pytest_plugin``,
since the package this suite runs from need not be installed with its entry point;
``test_the_entry_point_loads_it`` installs the entry point loop_auditor/pyproject.toml declares
(a dist-info folder on ``sys.path``) and checks that the fixture is then there with no ``-p``
and no conftest."""

import os
import re
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch
from torch import nn

from loop_auditor import pytest_plugin
from loop_auditor.session import AuditSession

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = ROOT / "loop_auditor"  # the loop auditor's pyproject.toml and README
PLUGIN = pytest_plugin.__name__

# loop_auditor/README.md's example test, character for character (test_readme_shows_the_example
# checks it): a two-step smoke test of a user's loop with gradient accumulation.
EXAMPLE = '''\
import torch
from torch import nn


def train(model, optimizer, batches, accumulation_steps):
    """Your training loop, unchanged (in your project, import it)."""
    for i, (x, y) in enumerate(batches):
        loss = nn.functional.mse_loss(model(x), y) / accumulation_steps
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


def test_two_steps_have_no_gradient_bugs(loop_audit):
    def train_two_steps():
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        batches = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(4)]
        train(model, optimizer, batches, accumulation_steps=2)

    session = loop_audit(train_two_steps, accumulation_steps=2)
    assert session.steps == 2
'''

FORGETS_ZERO_GRAD = EXAMPLE.replace("            optimizer.zero_grad()\n", "")

MODEL = """
import torch
from torch import nn

def train_two_steps():
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
        optimizer.step()
        {zero}
"""


@pytest.fixture(scope="module", autouse=True)
def torch_loaded():
    """An audited optimizer step here first. A run in this process drops the modules it
    imported, and the first step imports hundreds (torch._dynamo, sympy): a second import of
    those in one process crashes it. Imported here, they stay."""
    with AuditSession():
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.fixture
def run(pytester, monkeypatch):
    """``run(source)``: pytest on a user's test module ``source``, in this process, with the
    plugin and none of those this environment installs (they may not survive a second import
    either)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")

    def run(source: str):
        pytester.makepyfile(test_user=source)
        return pytester.runpytest_inprocess("-p", PLUGIN)

    return run


def user_test(body: str, zero: str = "optimizer.zero_grad()") -> str:
    """A user's test module: MODEL's two-step loop and one test with ``body``."""
    test = "def test_loop(loop_audit):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return MODEL.format(zero=zero) + "\n" + test


def shown_at_the_users_line(result) -> None:
    """The traceback ends at the user's test, not inside the loop auditor."""
    assert f"loop_auditor{os.sep}" not in result.stdout.str()


def test_readme_shows_the_example():
    readme = (DISTRIBUTION / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    assert EXAMPLE in blocks


def test_a_correct_two_step_loop_passes(run):
    run(EXAMPLE).assert_outcomes(passed=1)


def test_a_forgotten_zero_grad_fails_the_test_with_the_finding_and_its_fix(run):
    result = run(FORGETS_ZERO_GRAD)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E       Failed: loop auditor: 1 finding(s) in the audited run (1 optimizer, 2 steps):",
            "E         missing-zero-grad (optimizer, step 2): *optimizer.zero_grad()*",
        ]
    )
    # The traceback ends at the user's line, not inside the plugin.
    result.stdout.fnmatch_lines(
        [">       session = loop_audit(train_two_steps, accumulation_steps=2)"]
    )
    shown_at_the_users_line(result)


def test_an_allowed_code_is_not_a_failure(run):
    source = FORGETS_ZERO_GRAD.replace(
        "accumulation_steps=2)\n    assert",
        'accumulation_steps=2, allow=["missing-zero-grad"])\n    assert',
    )
    assert source != FORGETS_ZERO_GRAD
    run(source).assert_outcomes(passed=1)


def test_the_with_block_fails_at_its_end_with_the_findings(run):
    body = """
    with loop_audit(accumulation_steps=1) as session:
        train_two_steps()
    assert session.steps == 2
    """
    run(user_test(body)).assert_outcomes(passed=1)
    result = run(user_test(body, zero="pass"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E       Failed: loop auditor: 1 finding(s) in the audited run (1 optimizer, 2 steps):",
            "E         missing-zero-grad (optimizer, step 2): *",
        ]
    )
    shown_at_the_users_line(result)


def test_a_run_that_builds_no_optimizer_fails(run):
    result = run(user_test("loop_audit(lambda: None)"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E       Failed: loop auditor: the audited run built no optimizer and stepped none, so "
            "nothing was checked: build the optimizer and run at least one optimizer step "
            "inside loop_audit"
        ]
    )
    shown_at_the_users_line(result)


def test_a_run_that_steps_no_optimizer_fails(run):
    body = """
    def build_only():
        torch.optim.SGD(nn.Linear(4, 1).parameters(), lr=0.1)

    loop_audit(build_only)
    """
    result = run(user_test(body))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["E       Failed: loop auditor: the audited run made no optimizer step, so nothing was *"]
    )


def test_an_error_in_the_run_is_reported_as_it_is(run):
    body = """
    def crash():
        train_two_steps()
        raise RuntimeError("out of data")

    loop_audit(crash)
    """
    result = run(user_test(body, zero="pass"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E       RuntimeError: out of data"])
    assert "loop auditor:" not in result.stdout.str()
    shown_at_the_users_line(result)


def test_an_unknown_code_in_allow_is_a_value_error_that_lists_the_codes(run):
    result = run(user_test('loop_audit(train_two_steps, allow=["missing-zerograd"])'))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E       ValueError: unknown code(s) in allow: 'missing-zerograd'; the codes are: "
            "missing-zero-grad, zero-grad-before-step, *"
        ]
    )
    shown_at_the_users_line(result)


def test_a_non_positive_accumulation_steps_is_a_value_error(run):
    result = run(user_test("loop_audit(train_two_steps, accumulation_steps=0)"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E       ValueError: accumulation_steps must be 1 or more, got 0"])
    shown_at_the_users_line(result)


def test_a_non_callable_is_a_type_error_that_says_what_to_pass(run):
    body = """
    loop_audit(train_two_steps())  # the result, not the function
    """
    result = run(user_test(body))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E       TypeError: loop_audit takes the function that runs your training, got None: "
            "pass the function itself, loop_audit(train), not its result loop_audit(train()), "
            "or use a block: with loop_audit(accumulation_steps=2): ..."
        ]
    )
    shown_at_the_users_line(result)
    result = run(user_test("loop_audit(2)"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E       TypeError: loop_audit takes the function that runs your training, got 2: "
            "wrap the run in a function: loop_audit(lambda: train(model, loader)), "
            "or use a block: with loop_audit(accumulation_steps=2): ..."
        ]
    )
    shown_at_the_users_line(result)


def test_a_block_never_entered_is_an_error(run):
    body = """
    loop_audit(accumulation_steps=2)  # meant: with loop_audit(accumulation_steps=2):
    train_two_steps()
    """
    result = run(user_test(body))
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "loop_audit(...) was called without a function and never used as a block, so "
            "nothing was audited: write `with loop_audit(...):` or pass the function, "
            "loop_audit(train)"
        ]
    )


def test_pyproject_declares_the_entry_point():
    pyproject = tomllib.loads((DISTRIBUTION / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["pytest11"] == {PLUGIN: PLUGIN}


def test_the_entry_point_loads_it(pytester, monkeypatch):
    """Installed, the package's pytest11 entry point makes the fixture available with no -p
    and no conftest; with -p as well, it is registered once (it is named as the module)."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pyproject = tomllib.loads((DISTRIBUTION / "pyproject.toml").read_text())
    entry_points = pyproject["project"]["entry-points"]
    dist_info = pytester.mkdir("site") / "loop_audit_entry_point_check-0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: loop-audit-entry-point-check\nVersion: 0\n"
    )
    lines = [
        f"[{group}]" + "".join(f"\n{k} = {v}" for k, v in eps.items())
        for group, eps in entry_points.items()
    ]
    (dist_info / "entry_points.txt").write_text("\n\n".join(lines) + "\n")
    pytester.syspathinsert(pytester.path / "site")
    pytester.makepyfile(test_user=EXAMPLE)
    pytester.runpytest_inprocess().assert_outcomes(passed=1)
    pytester.runpytest_inprocess("-p", PLUGIN).assert_outcomes(passed=1)
