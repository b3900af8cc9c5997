"""Every checker passes the solution and rejects typical wrong answers with the right hint."""

import pytest
import torch

from helpers.checks import (
    CheckResult,
)
from helpers.setup_check.checkers_00 import check_forced_device


def assert_hint(result: CheckResult, *fragments: str):
    assert not result.passed
    for fragment in fragments:
        assert fragment in result.message, result.message


class TestForcedDevice:
    def test_solution_passes(self):
        assert check_forced_device("cpu").passed
        assert check_forced_device(" CPU ").passed
        assert check_forced_device(torch.device("cpu")).passed

    @pytest.mark.parametrize(
        ("answer", "hint"),
        [
            ("cuda", "reads GM_DEVICE first"),
            ("cuda:0", "reads GM_DEVICE first"),
            ("GPU", "reads GM_DEVICE first"),
            ("mps", "Apple silicon's GPU"),
            ("tpu", "use one of those names"),
            (..., "Not answered yet"),
        ],
    )
    def test_typical_mistakes_get_their_hint(self, answer, hint):
        assert_hint(check_forced_device(answer), hint)

    def test_wrong_type(self):
        assert_hint(check_forced_device(0), "must be a string such as 'cuda', got int")
        assert_hint(check_forced_device(None), "got None")

    def test_answer_does_not_depend_on_this_machine(self, monkeypatch):
        monkeypatch.setenv("GM_DEVICE", "cuda")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert check_forced_device("cpu").passed
        assert_hint(check_forced_device("cuda"), "reads GM_DEVICE first")
