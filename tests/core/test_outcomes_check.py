"""The outcomes check (helpers/outcomes): every expected answer computed by running the code
its item shows, the two checks parallel, wrong answers named by their misconception, answers of
the wrong kind refused with what is expected, and the pre-check's file and the change."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch.nn import functional as F

from helpers.accumulation import windows
from helpers.checks import CheckResult
from helpers.data import make_teacher_batches
from helpers.loop_runs import audited_run
from helpers.models import make_mlp
from helpers.outcomes_check import PRE_CHECK_FILE, OutcomesCheck, read_pre_check
from helpers.outcomes_items import CHECKS, MISCONCEPTIONS, OUTCOMES, POST, PRE, REVIEW_OPTIONS
from helpers.translation import translate

BOTH = [pytest.param(items, id=name) for name, items in CHECKS.items()]


def run_shown(code: str) -> dict:
    names = {"torch": torch}
    exec(code, names)
    return names


def asked(item) -> float:
    names = run_shown(item.code)
    return float(eval(item.given["asks"], names).detach())


def by_id(items, item_id):
    return next(item for item in items if item.id == item_id)


@pytest.mark.parametrize("items", BOTH)
def test_each_prediction_is_what_its_code_gives(items):
    for item_id in ("O1.1", "O1.2", "O1.3", "O1.4"):
        item = by_id(items, item_id)
        assert math.isclose(asked(item), item.judge.expected, abs_tol=1e-6), item_id
        assert item.judge(asked(item)) == (True, None)


@pytest.mark.parametrize("items", BOTH)
def test_each_predictions_mistakes_are_what_the_misconception_computes(items):
    grads = by_id(items, "O1.1")
    last_line = grads.code.splitlines()[-1]  # the last backward() alone
    alone = run_shown("\n".join(grads.code.splitlines()[:-1]) + "\nw.grad = None\n" + last_line)
    assert grads.judge(float(alone["w"].grad)) == (False, "replaced")

    piled = by_id(items, "O1.2")  # each step with only its own backward()'s gradient
    replaced = piled.code.replace("    (", "    w.grad = None\n    (")
    assert piled.judge(run_shown(replaced)["w"].item()) == (False, "replaced")

    zeros, nones = by_id(items, "O1.3"), by_id(items, "O1.4")
    lines = zeros.code.splitlines()
    reset = "\n".join([*lines[:-1], lines[1], lines[-1]])  # a fresh optimizer: no momentum
    assert zeros.judge(run_shown(reset)["w"].item()) == (False, "zero_grad_resets_momentum")
    assert nones.judge(asked(zeros)) == (False, "none_like_zeros")  # None stepped like zeros
    for item in (zeros, nones):
        assert item.judge(1.0) == (False, "zero_grad_undoes")  # where w started


def window_loop(lines: dict, order: str):
    source = "def train(model, optimizer, loss_fn, micro_batches, accumulation_steps):\n"
    source += "\n".join("    " + lines[c] for c in order)
    names = {}
    exec(source, names)
    return names["train"]


def trained(train) -> torch.Tensor:
    model = make_mlp((8, 16, 1), seed=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, optimizer, F.mse_loss, make_teacher_batches(n_batches=10, features=8), 4)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def reference_window_loop(model, optimizer, loss_fn, micro_batches, accumulation_steps):
    for window in windows(micro_batches, accumulation_steps):
        optimizer.zero_grad()
        for inputs, targets in window:
            (loss_fn(model(inputs), targets) / len(window)).backward()
        optimizer.step()


@pytest.mark.parametrize("items", BOTH)
def test_every_accepted_order_trains_like_a_window_loop_and_a_distractor_does_not(items):
    item = by_id(items, "O2.1")
    lines, orders = item.judge.lines, item.judge.orders
    reference = trained(reference_window_loop)
    for order in orders:
        assert torch.allclose(trained(window_loop(lines, order)), reference), order
        assert item.judge(order.upper()) == (True, None)
        assert item.judge(" ".join(order)) == (True, None)
    right_backward = next(c for c, line in lines.items() if "/ len(window)" in line)
    by_k = next(c for c, line in lines.items() if "/ accumulation_steps)" in line)
    zero_inside = next(c for c, line in lines.items() if line == "        optimizer.zero_grad()")
    divided_by_k = orders[0].replace(right_backward, by_k)
    zeroed_inside = orders[0].replace(right_backward, zero_inside + right_backward)
    for order, misconception in (
        (divided_by_k, "tail_by_k"),
        (zeroed_inside, "zero_inside_window"),
    ):
        assert not torch.allclose(trained(window_loop(lines, order)), reference)
        assert item.judge(order) == (False, misconception)


@pytest.mark.parametrize("items", BOTH)
def test_the_counts_are_what_the_windows_make(items):
    tail = by_id(items, "O2.2")
    n, k = tail.given["micro_batches"], tail.given["accumulation_steps"]
    assert tail.judge(len(list(windows(list(range(n)), k))[-1])) == (True, None)
    assert tail.judge(k) == (False, "tail_by_k")
    steps = by_id(items, "O2.4")
    n, k, epochs = (steps.given[key] for key in ("micro_batches", "accumulation_steps", "epochs"))
    assert steps.judge(epochs * len(list(windows(list(range(n)), k)))) == (True, None)
    assert steps.judge(epochs * n) == (False, "schedule_in_micro_batches")
    assert steps.judge(epochs * (n // k)) == (False, "tail_not_a_step")
    assert steps.judge(epochs * n / k) == (False, "tail_not_a_step")


def loop_of(code: str):
    names = {"F": F}
    exec(code, names)
    return names["train"]


def last_step(loop, batches):
    """The gradient the loop's last step used, and a copy of the model as it was then."""
    model = make_mlp((8, 16, 1), seed=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []

    def record(*_):
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        seen.append((grads, copy.deepcopy(model)))

    optimizer.register_step_pre_hook(record)
    loop(model, optimizer, batches)
    return seen[-1]


@pytest.mark.parametrize("items", BOTH)
def test_each_reviewed_loop_has_the_fault_its_answer_names(items):
    batches = make_teacher_batches(n_batches=10, features=8)
    codes = {
        "a": [],
        "d": ["zero-grad-before-step"],
        "e": ["graph-kept-alive"],
    }
    for item in items:
        if item.outcome != "O3":
            continue
        loop, expected = loop_of(item.code), item.judge.expected
        found = audited_run(loop, batches, accumulation_steps=4 if expected == "c" else None)
        if expected in codes:
            assert found.codes == codes[expected], (item.id, found.codes)
            continue
        # the tail: dropped (the auditor sees its gradients left over) or divided by k
        if found.codes:
            assert found.codes == ["leftover-gradients"], found.codes
        else:
            got, model = last_step(loop, batches)
            tail = batches[-2:]
            model.zero_grad()
            for inputs, targets in tail:
                (F.mse_loss(model(inputs), targets) / len(tail)).backward()
            exact = torch.cat([p.grad.flatten() for p in model.parameters()])
            assert torch.allclose(got, exact * len(tail) / 4, atol=1e-6)  # 2 of 4: half


def test_the_two_checks_ask_about_the_same_misconceptions_in_the_same_places():
    assert [i.id for i in PRE] == [i.id for i in POST]
    for before, after in zip(PRE, POST, strict=True):
        assert before.misconceptions == after.misconceptions, before.id
        assert before.code != after.code or before.given != after.given or not before.code
    assert [i.outcome for i in PRE].count("O1") == 4 and set(OUTCOMES) == {"O1", "O2", "O3"}
    for outcome in OUTCOMES:
        assert sum(i.outcome == outcome for i in PRE) == 4
    used = {m for item in PRE for m in item.misconceptions}
    assert used == set(MISCONCEPTIONS)


def right_answers(items) -> dict:
    return {item.id: item.judge.expected for item in items}


@pytest.mark.parametrize("which", ["pre", "post"])
def test_the_model_answers_score_every_outcome_fully(tmp_path, which):
    outcomes = OutcomesCheck(which, folder=tmp_path)
    for item_id, answer in right_answers(CHECKS[which]).items():
        result = outcomes.answer(item_id, answer)
        assert isinstance(result, CheckResult) and result.passed, (item_id, result.message)
    assert all(s.right == s.asked == 4 for s in outcomes.scores().values())
    text = repr(outcomes.report())
    assert "O1" in text and "4 of 4 right" in text and outcomes.misconceptions_found() == []


def test_a_wrong_answer_is_recorded_with_what_it_suggests(tmp_path):
    outcomes = OutcomesCheck("pre", folder=tmp_path)
    result = outcomes.answer("O1.1", 4.0)
    assert not result.passed and translate(MISCONCEPTIONS["replaced"]) in result.message
    result = outcomes.answer("O1.1", 123.0)
    assert not result.passed and "recorded" in result.message
    assert outcomes.answer("O1.1", 7).passed  # answering again replaces the answer
    assert outcomes.scores()["O1"].right == 1 and outcomes.misconceptions_found() == []


@pytest.mark.parametrize(
    ("item_id", "answer", "expected"),
    [
        ("O1.1", "7", "a number such as 17.0"),
        ("O1.1", None, "a number such as 17.0"),
        ("O2.1", 42, "the letters of the lines in order"),
        ("O2.1", "xyz", "the letters of the lines in order"),
        ("O2.3", "d", "one of the letters a, b, c"),
        ("O2.3", 3, "one of the letters a, b, c"),
        ("O3.1", "ab", "one of the letters a, b, c, d, e"),
    ],
)
def test_an_answer_of_the_wrong_kind_says_what_is_expected_and_is_not_recorded(
    tmp_path, item_id, answer, expected
):
    outcomes = OutcomesCheck("pre", folder=tmp_path)
    result = outcomes.answer(item_id, answer)
    assert not result.passed and expected in result.message, result.message
    assert item_id not in outcomes.verdicts


def test_unanswered_items_are_left_out_of_the_score_and_nothing_is_kept(tmp_path):
    outcomes = OutcomesCheck("pre", folder=tmp_path)
    assert outcomes.answer("O1.1", ...).unanswered
    report = repr(outcomes.report())
    assert "0 of 4 right (4 not answered yet)" in report
    assert not (tmp_path / PRE_CHECK_FILE).exists()


def test_the_post_check_shows_the_change_from_the_kept_pre_check(tmp_path):
    pre = OutcomesCheck("pre", folder=tmp_path)
    pre.answer("O1.1", 4.0)  # wrong: replaced
    pre.answer("O1.2", 0.4)  # right
    pre.report()
    assert json.loads((tmp_path / PRE_CHECK_FILE).read_text())["right"] == {
        "O1": 1,
        "O2": 0,
        "O3": 0,
    }
    post = OutcomesCheck("post", folder=tmp_path)
    for item_id, answer in right_answers(POST).items():
        post.answer(item_id, answer)
    text = repr(post.report())
    assert "O1 (" in text and "4 of 4 right; before the course 1 of 4, +3" in text
    assert "before the course 0 of 4, +4" in text


def test_without_a_pre_check_the_post_check_still_scores(tmp_path):
    post = OutcomesCheck("post", folder=tmp_path / "nothing here")
    post.answer("O3.4", "e")
    text = repr(post.report())
    assert "O3 (" in text and "1 of 4 right" in text and "No pre-check on file" in text


@pytest.mark.parametrize("content", ["", "{", '{"right": 3}', '{"right": {"O1": "x"}}', "[]"])
def test_an_unreadable_pre_check_is_as_if_there_were_none(tmp_path, content):
    path = tmp_path / PRE_CHECK_FILE
    path.write_text(content)
    assert read_pre_check(path) is None


def test_bad_input_to_the_check_is_refused_with_what_to_change(tmp_path):
    with pytest.raises(ValueError, match="which must be 'pre' or 'post'"):
        OutcomesCheck("middle", folder=tmp_path)
    with pytest.raises(ValueError, match=r"item_id must be one of O1\.1"):
        OutcomesCheck("pre", folder=tmp_path).answer("O4.1", 1)


@pytest.mark.parametrize("items", BOTH)
def test_each_review_answer_and_mistake_is_one_of_the_options(items):
    for item in items:
        if item.outcome == "O3":
            assert item.judge.expected in REVIEW_OPTIONS
            for letter in REVIEW_OPTIONS:  # every option is judged, none raises
                right, misconception = item.judge(letter)
                assert right is (letter == item.judge.expected)
                assert misconception is None or misconception in MISCONCEPTIONS
