"""The message catalogs (tools/message_catalogs.py): the committed ones are complete and
compiled, and `check` names each kind of problem."""

from __future__ import annotations

import textwrap

import message_catalogs
import polib
import pytest
from message_catalogs import DOMAINS, Domain, check, run_compile, run_extract


def test_the_committed_catalogs_are_complete_translated_and_compiled():
    assert check() == []
    for domain in DOMAINS:
        assert domain.mo_path().exists(), domain


@pytest.fixture
def package(tmp_path):
    """A package ``demo`` with two messages, its catalog extracted, translated and compiled."""
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / "verdicts.py").write_text(
        textwrap.dedent(
            """
            from translation import _, N_
            HINT = N_("`.grad` adds: 3 backward calls")
            def verdict(steps):
                return _("{steps} steps, each with `step()`").format(steps=steps)
            """
        )
    )
    domain = Domain("demo", folder)
    assert run_extract([domain]) == []
    po = polib.pofile(str(domain.po_path()))
    assert [e.msgid for e in po] == [
        "`.grad` adds: 3 backward calls",
        "{steps} steps, each with `step()`",
    ]
    assert po.metadata["Language"] == "zh_CN"
    po[0].msgstr = "`.grad` 会累加：3 次 backward 调用"
    po[1].msgstr = "{steps} 步，每步都有 `step()`"
    po.save()
    run_compile([domain])
    assert check([domain]) == []
    return domain


def edit(domain: Domain, msgid: str, msgstr: str) -> None:
    po = polib.pofile(str(domain.po_path()))
    po.find(msgid).msgstr = msgstr
    po.save()


def test_a_new_message_is_added_untranslated(package):
    with (package.package / "verdicts.py").open("a") as source:
        source.write('MORE = _("a new message")\n')
    [problem] = check([package])
    assert "verdicts.py:6: not in " in problem and "(run extract)" in problem
    assert run_extract([package]) == []
    problems = check([package])
    assert any("not translated: 'a new message'" in p for p in problems), problems
    assert any("stale" in p for p in problems) is False  # the MO still matches the PO


def test_a_removed_message_is_dropped_and_a_changed_one_is_fuzzy(package):
    path = package.package / "verdicts.py"
    path.write_text(path.read_text().replace("3 backward calls", "3 backward() calls"))
    problems = check([package])
    assert any("no longer in the sources" in p for p in problems), problems
    run_extract([package])
    po = polib.pofile(str(package.po_path()))
    changed = po.find("`.grad` adds: 3 backward() calls")
    assert changed.fuzzy and changed.msgstr == "`.grad` 会累加：3 次 backward 调用"
    assert changed.previous_msgid == "`.grad` adds: 3 backward calls"
    assert po.find("`.grad` adds: 3 backward calls") is None
    problems = check([package])
    assert any("demo.po:" in p and "fuzzy, its English changed" in p for p in problems)
    assert any("demo.mo: stale" in p for p in problems)  # a fuzzy entry is not compiled


def test_an_empty_translation_fails(package):
    edit(package, "{steps} steps, each with `step()`", "")
    problems = check([package])
    assert any("not translated" in p for p in problems), problems


def test_an_mo_that_differs_from_its_po_is_stale(package):
    edit(package, "{steps} steps, each with `step()`", "共 {steps} 步，每步都有 `step()`")
    [problem] = check([package])
    assert problem.endswith("demo.mo: stale, it differs from its PO (run compile)")
    run_compile([package])
    assert check([package]) == []
    package.mo_path().unlink()
    [problem] = check([package])
    assert "demo.mo: missing (run compile)" in problem


@pytest.mark.parametrize(
    ("msgstr", "kind", "detail"),
    [
        ("{count} 步，每步都有 `step()`", "placeholders", "missing {steps}, added {count}"),
        ("{steps} 步，每步都有 step()", "code spans", "missing `step()`"),
        (
            "{steps} 步，每步都有 `optimizer.step()`",
            "code spans",
            "missing `step()`, added `optimizer.step()`",
        ),
        ("{steps} 步（共 2 次），每步都有 `step()`", "numbers", "added 2"),
    ],
)
def test_a_translation_keeps_placeholders_code_spans_and_numbers(package, msgstr, kind, detail):
    edit(package, "{steps} steps, each with `step()`", msgstr)
    run_compile([package])
    [problem] = check([package])
    assert f"its {kind} differ from the English, {detail}" in problem
    edit(package, "`.grad` adds: 3 backward calls", "`.grad` 会累加：三次 backward 调用")
    edit(package, "{steps} steps, each with `step()`", "{steps} 步，每步都有 `step()`")
    run_compile([package])
    [problem] = check([package])
    assert "its numbers differ from the English, missing 3" in problem


def test_a_translation_writes_times_not_x_between_numbers_outside_code(package):
    def multiplies(msgid: str, msgstr: str) -> list[str]:
        edit(package, msgid, msgstr)
        run_compile([package])
        return [problem for problem in check([package]) if "multiplies" in problem]

    steps = "{steps} steps, each with `step()`"
    [problem] = multiplies(steps, "{steps} 步（2 x {steps}），每步都有 `step()`")
    assert "it multiplies with x (2 x {): write × in the translation" in problem
    assert multiplies(steps, "{steps} 步（2 × {steps}），每步都有 `step()`") == []
    assert multiplies(steps, "{steps} 步，每步都有 `step()`（`2 x 3`）") == []


@pytest.mark.parametrize(
    ("call", "says"),
    [
        ('_(f"{steps} steps")', "f-string"),
        ("_(message)", "takes one string literal"),
        ('N_("a" + "b")', "takes one string literal"),
        ('_("")', "empty string"),
    ],
)
def test_a_message_that_cannot_be_extracted_is_an_error_with_its_line(package, call, says):
    with (package.package / "verdicts.py").open("a") as source:
        source.write(f"WRONG = {call}\n")
    assert any("verdicts.py:6: " in p and says in p for p in check([package]))
    errors = run_extract([package])
    assert len(errors) == 1 and "verdicts.py:6: " in errors[0] and says in errors[0]


def test_the_command_line_reports_and_exits(package, monkeypatch, capsys):
    monkeypatch.setattr(message_catalogs, "DOMAINS", (package,))
    assert message_catalogs.main(["check"]) == 0
    assert capsys.readouterr().out == "demo: 2 messages, all translated\n"
    edit(package, "{steps} steps, each with `step()`", "")
    assert message_catalogs.main(["check"]) == 1
    assert "not translated" in capsys.readouterr().out
