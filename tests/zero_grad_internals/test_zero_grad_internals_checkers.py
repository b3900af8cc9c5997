"""Every checker passes the solution and rejects typical wrong answers with the right hint."""

import pytest
from answers import second_try

from helpers.checks import (
    CheckResult,
)
from helpers.zero_grad_internals.checkers_02 import (
    check_correct_loops,
    check_grad_after_sequence,
    check_moved_parameters,
)


def assert_hint(result: CheckResult, *fragments: str):
    assert not result.passed
    for fragment in fragments:
        assert fragment in result.message, result.message


class TestGradAfterSequence:
    def test_solution_passes(self):
        assert check_grad_after_sequence(2 * (2.0 - 0.1 * 8)).passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            (4, "step() moved w before the last backward"),
            (10.4, "restarted from zeros"),
            (None, "leaves a tensor of zeros"),
            (0, "one more backward() added"),
            (3.2, "`.grad` is 8 before the step, not 4"),
            (1.2, "That is w after the step"),
            (12, "skips both the step"),
            (1.44, "the value of w ** 2 at w = 1.2"),
            (3, "Follow w and .grad line by line"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(second_try(check_grad_after_sequence, answer), hint)


class TestMovedParameters:
    def test_solution_passes_in_any_container(self):
        assert check_moved_parameters({"a"}).passed
        assert check_moved_parameters(["a"]).passed
        assert check_moved_parameters("a").passed
        assert check_moved_parameters("A").passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            ({"a", "b"}, "first step: its moments start at zero"),
            ({"a", "c"}, "c's grad is None"),
            ({"b"}, "a has a real gradient"),
            ({"x"}, "named 'a', 'b' and 'c'"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(check_moved_parameters(answer), hint)

    def test_wrong_type(self):
        assert_hint(check_moved_parameters(3), "set of names")
        assert_hint(check_correct_loops(None), "set of names", "got None")


class TestCorrectLoops:
    def test_solution_passes(self):
        assert check_correct_loops({"A", "C"}).passed
        assert check_correct_loops("a, c").passed
        assert check_correct_loops("A and C").passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            ({"A"}, "C zeroes only before the first batch of each pair"),
            ({"C"}, "A zeroes right after each step()"),
            ({"A", "B", "C"}, "B zeroes at the top of every batch"),
            ({"A", "C", "D"}, "D zeroes at the end of every batch"),
            ({"E"}, "named 'A', 'B', 'C' and 'D'"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(second_try(check_correct_loops, answer), hint)
