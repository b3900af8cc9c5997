"""The Chinese notebooks print the English notebooks' numbers: their code is the same code, so
every number in a code cell's output (text, stream or error; not images or widget ids) must be
the English cell's, in any order (Chinese word order may move a number within a message), and
the same outputs must be there. Cells whose output truly varies (tagged nbval-ignore-output)
are compared only by kind."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from course import chinese_notebook_paths, notebook_paths, read

# A number on its own: not part of an identifier or a word in Latin letters (fp16, cu121, 4th,
# 0x1f), not a version's or a path's piece; CJK characters around it do not matter.
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![A-Za-z0-9_])")
IGNORED = "nbval-ignore-output"


def output_text(output) -> str:
    """What a learner reads in one output: a stream's text, a result's text/plain, an error."""
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return f"{output.ename}: {output.evalue}"
    return output.get("data", {}).get("text/plain", "")


def numbers(text: str) -> Counter:
    return Counter(NUMBER.findall(text))


def kinds(cell) -> list[str]:
    return [output.output_type for output in cell.get("outputs", [])]


PAIRS = [
    (english, chinese)
    for chinese in chinese_notebook_paths()
    for english in notebook_paths()
    if english.name == chinese.name
]


def test_every_chinese_notebook_has_its_english_one():
    assert len(PAIRS) == len(chinese_notebook_paths()) >= 10


def differences(english_nb, chinese_nb) -> list[str]:
    """Where the Chinese notebook's outputs do not hold the English one's numbers."""
    english_cells = {c.id: c for c in english_nb.cells if c.cell_type == "code"}
    chinese_cells = {c.id: c for c in chinese_nb.cells if c.cell_type == "code"}
    if chinese_cells.keys() != english_cells.keys():
        return [f"code cells {sorted(english_cells)} in English, {sorted(chinese_cells)}"]
    found = []
    for cell_id, zh in chinese_cells.items():
        en = english_cells[cell_id]
        tags = en.metadata.get("tags", [])
        if "course-setup" in tags:
            continue  # generated, and prints nothing on a torch that is new enough
        if kinds(en) != kinds(zh):
            found.append(f"cell {cell_id}: outputs {kinds(en)} in English, {kinds(zh)}")
        elif IGNORED not in tags:
            for en_out, zh_out in zip(en.outputs, zh.outputs, strict=True):
                en_numbers, zh_numbers = numbers(output_text(en_out)), numbers(output_text(zh_out))
                if en_numbers != zh_numbers:
                    only_en, only_zh = dict(en_numbers - zh_numbers), dict(zh_numbers - en_numbers)
                    found.append(f"cell {cell_id}: English only {only_en}, Chinese only {only_zh}")
    return found


@pytest.mark.parametrize("english, chinese", PAIRS, ids=[p[1].name for p in PAIRS])
def test_the_chinese_outputs_hold_the_english_numbers(english, chinese):
    found = differences(read(english), read(chinese))
    assert not found, f"{chinese.name}:\n" + "\n".join(found)


def test_a_changed_or_missing_number_is_found_and_a_moved_one_is_not():
    english, chinese = PAIRS[1]  # 01: a notebook that prints numbers
    en_nb = read(english)
    [cell] = [
        c
        for c in read(chinese).cells
        if c.cell_type == "code"
        and any(NUMBER.search(output_text(o)) for o in c.outputs)
        and IGNORED not in c.metadata.get("tags", [])
    ][:1]
    printed = next(o for o in cell.outputs if NUMBER.search(output_text(o)))
    text = output_text(printed)
    first = NUMBER.search(text)

    def with_text(new: str):
        zh_nb = read(chinese)
        target = next(c for c in zh_nb.cells if c.id == cell.id)
        out = target.outputs[cell.outputs.index(printed)]
        if out.output_type == "stream":
            out.text = new
        else:
            out.data["text/plain"] = new
        return zh_nb

    changed = text[: first.start()] + first.group() + "1" + text[first.end() :]
    assert differences(en_nb, with_text(changed)) != []
    assert differences(en_nb, with_text(NUMBER.sub("", text, count=1))) != []
    moved = " ".join(NUMBER.findall(text)[::-1]) + " " + NUMBER.sub("", text)
    assert differences(en_nb, with_text(moved)) == []


def test_numbers_are_found_as_a_reader_sees_them():
    text = "第 4 次更新：loss 0.25，fp16 的 4th 值 -3 和 1e-06（x_2，v2.13）"
    assert numbers(text) == Counter({"4": 1, "0.25": 1, "-3": 1, "1e-06": 1})
