"""Helpers of notebook 02: grad inspection, measurement, optimizer experiments, zero_grad
zero_grad_facts."""

import inspect
import textwrap

import pytest
import torch
from answers import second_try
from course import NOTEBOOKS, read
from torch import nn

from helpers.data import make_article_setup, split_batches
from helpers.grads import GradLog, describe_grad, grad_state, grad_states
from helpers.measure import grad_bytes
from helpers.zero_grad_internals import checkers_02, zero_grad_facts
from helpers.zero_grad_internals.optimizer_steps import (
    GRAD_MODES,
    OPTIMIZERS,
    PLACEMENTS,
    format_second_steps,
    frozen_layer_drift,
    make_optimizer,
    second_step,
    train_with_zero_grad_at,
)


@pytest.fixture(scope="module")
def batches():
    inputs, targets, _ = make_article_setup()
    return split_batches(inputs, targets, 20)


@pytest.fixture
def network():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 1))


class TestGrads:
    def test_grad_state_tells_none_zeros_and_nonzero(self):
        p = nn.Parameter(torch.ones(2))
        assert grad_state(p) == "None"
        p.grad = torch.zeros(2)
        assert grad_state(p) == "zeros"
        p.grad = torch.tensor([0.0, 1.0])
        assert grad_state(p) == "nonzero"
        with pytest.raises(TypeError):
            grad_state("p")

    def test_grad_states_summarise_modules(self, network):
        network(torch.randn(3, 10)).sum().backward()
        network[0].bias.grad = None
        states = grad_states({"first": network[0], "last": network[2], "w": network[2].weight})
        assert states == {"first": "mixed", "last": "nonzero", "w": "nonzero"}
        with pytest.raises(ValueError, match="non-empty dict"):
            grad_states({})
        with pytest.raises(ValueError, match="has no parameters"):
            grad_states({"act": nn.Tanh()})

    def test_describe_grad(self):
        p = nn.Parameter(torch.ones(5))
        assert describe_grad(p) == "None"
        p.grad = torch.full((5,), 2.0)
        assert describe_grad(p).startswith("tensor with norm 4.472")
        q = nn.Parameter(torch.ones(2))
        q.grad = torch.tensor([1.5, -2.0])
        assert describe_grad(q) == "[1.5, -2]"

    def test_grad_log_records_the_sequence_and_cleans_up(self):
        w = nn.Parameter(torch.tensor([2.0]))
        optimizer = torch.optim.SGD([w], lr=0.1)
        with GradLog(w, optimizer) as log:
            (w**2).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        assert log.events == [
            "backward   .grad = [4]",
            "step       .grad = [4]",
            "zero_grad  .grad = None",
        ]
        (w**2).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        assert len(log.events) == 3, "hooks and the zero_grad wrapper are removed on exit"
        assert "zero_grad" not in vars(optimizer)

    def test_grad_log_rejects_bad_input(self):
        with pytest.raises(ValueError, match="leaf tensor that requires grad"):
            GradLog(torch.ones(1))
        with pytest.raises(TypeError, match=r"torch\.optim\.Optimizer"):
            GradLog(nn.Parameter(torch.ones(1)), optimizer="sgd")


class TestMeasure:
    def test_grad_bytes_counts_exactly(self):
        a, b = nn.Parameter(torch.ones(3, 4)), nn.Parameter(torch.ones(5, dtype=torch.float64))
        assert grad_bytes([a, b]) == 0
        (a.sum() + b.sum()).backward()
        assert grad_bytes([a, b]) == 12 * 4 + 5 * 8
        with pytest.raises(TypeError, match="not a tensor"):
            grad_bytes([a, "b"])


class TestNoneVersusZeros:
    def test_none_skips_every_optimizer_and_zeros_move_all_but_plain_sgd(self):
        for name in OPTIMIZERS:
            none, zeros = (second_step(name, mode) for mode in GRAD_MODES)
            assert not none.moved
            assert zeros.moved == (name != "SGD")

    def test_the_briefs_measured_values(self):
        assert second_step("SGD momentum=0.9", "zeros").after_second == pytest.approx(0.905)
        adam = second_step("Adam", "zeros")
        assert (adam.after_first, adam.state_step) == (pytest.approx(0.9), 2)
        assert adam.after_second == pytest.approx(0.833, abs=1e-3)
        assert second_step("Adam", "None").state_step == 1

    def test_table_has_a_row_per_case(self):
        rows = [second_step("SGD", mode) for mode in GRAD_MODES]
        assert len(format_second_steps(rows).splitlines()) == 3

    def test_bad_names_are_refused(self):
        with pytest.raises(ValueError, match="unknown optimizer 'Adagrad'"):
            make_optimizer("Adagrad", [nn.Parameter(torch.ones(1))])
        with pytest.raises(ValueError, match="'None' or 'zeros'"):
            second_step("SGD", None)

    def test_zeroed_grads_do_not_freeze_a_layer_under_adamw(self, network, batches):
        drift = frozen_layer_drift(network, network[0], batches, frozen_steps=5)
        assert drift["zero its grads"] > 0.01
        assert drift["requires_grad_(False), zero_grad(set_to_none=False)"] > 0.01
        assert drift["set its grads to None"] == 0.0
        assert drift["requires_grad_(False), zero_grad()"] == 0.0
        plain = frozen_layer_drift(network, network[0], batches, optimizer_name="SGD")
        assert set(plain.values()) == {0.0}

    def test_drift_rejects_a_foreign_layer(self, network, batches):
        with pytest.raises(ValueError, match="one of model's submodules"):
            frozen_layer_drift(network, nn.Linear(10, 8), batches)


class TestPlacements:
    @pytest.mark.parametrize("set_to_none", [True, False])
    def test_only_between_backward_and_step_is_wrong(self, network, batches, set_to_none):
        start = torch.cat([p.detach().flatten() for p in network.parameters()])
        trained = {
            place: train_with_zero_grad_at(
                network, batches, place, set_to_none=set_to_none, steps=6
            )
            for place in PLACEMENTS
        }
        assert torch.equal(trained["after forward"], trained["before forward"])
        assert torch.equal(trained["after step"], trained["before forward"])
        assert not torch.equal(trained["before forward"], start)
        assert torch.equal(trained["between backward and step"], start)

    def test_unknown_placement(self, network, batches):
        with pytest.raises(ValueError, match="unknown placement"):
            train_with_zero_grad_at(network, batches, "never", set_to_none=True, steps=1)


class TestZeroGradFacts:
    def test_the_facts_notebook_02_teaches(self):
        assert zero_grad_facts.default_set_to_none(torch.optim.Optimizer.zero_grad) is True
        assert zero_grad_facts.clears_every_param_group()
        assert zero_grad_facts.leaves_none_grads_alone()
        for via in ("optimizer", "module"):
            observed = zero_grad_facts.zeroing_keeps_the_tensor(via)
            assert observed["same tensor after"] and observed["all zeros after"]
            assert not observed["grad_fn after"] and not observed["requires_grad after"]
        with pytest.raises(ValueError, match="via must be"):
            zero_grad_facts.zeroing_keeps_the_tensor("model")
        assert zero_grad_facts.foreach_zero_calls() == 0
        assert zero_grad_facts.foreach_zero_calls(foreach=True) == 1
        assert zero_grad_facts.foreach_zero_calls(foreach=False) == 0

    def test_an_optimizer_this_torch_cannot_build_gives_none(self):
        assert zero_grad_facts.foreach_zero_calls(no_such_option=True) is None

    def test_the_foreach_counter_restores_torch(self):
        original = torch._foreach_zero_
        zero_grad_facts.foreach_zero_calls(foreach=True)
        assert torch._foreach_zero_ is original

    def test_a_method_without_set_to_none(self):
        with pytest.raises(ValueError, match="no set_to_none parameter"):
            zero_grad_facts.default_set_to_none(torch.optim.Optimizer.step)


def test_median_seconds_each_takes_turns_and_refuses_bad_input():
    from helpers.measure import median_seconds_each

    calls = []
    times = median_seconds_each(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        setup=lambda: calls.append("setup"),
        repeats=2,
    )
    assert calls == ["setup", "a", "setup", "b"] * 3, "turns, with setup before each run"
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        median_seconds_each({"a": lambda: None}, repeats=0)
    with pytest.raises(ValueError):
        median_seconds_each({})
    with pytest.raises(TypeError):
        median_seconds_each({"a": 3})


class TestPairLoops:
    """Exercise 02.2: four loops meant to step once per pair of batches."""

    def test_the_notebook_shows_the_loops_that_run(self):
        nb = read(NOTEBOOKS / "02_zero_grad_internals.ipynb")
        [text] = [c.source for c in nb.cells if c.source.startswith("## Exercise 02.2")]
        for letter, loop in checkers_02.ACCUMULATION_LOOPS.items():
            body = textwrap.dedent(inspect.getsource(loop).split("\n", 1)[1]).rstrip()
            assert f"**{letter}**\n```python\n{body}\n```" in text, letter

    def test_a_and_c_add_up_each_pair_b_and_d_keep_half(self):
        ex = checkers_02
        assert ex.correct_pair_loops() == {"A", "C"}
        weights = {}
        for letter, loop in ex.ACCUMULATION_LOOPS.items():
            model, batches = ex._loop_case()
            loop(model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
            weights[letter] = torch.cat([p.detach().flatten() for p in model.parameters()])
        assert torch.equal(weights["B"], weights["D"]), "both step with the second batch only"
        model, batches = ex._loop_case()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in batches[1::2]:  # the second batch of each pair, alone
            optimizer.zero_grad()
            ex.loss_fn(model(x), y).backward()
            optimizer.step()
        second_only = torch.cat([p.detach().flatten() for p in model.parameters()])
        assert torch.allclose(weights["B"], second_only, atol=1e-6)
        assert not torch.allclose(weights["A"], second_only, atol=1e-3)

    @pytest.mark.parametrize(
        ("answer", "named", "not_named"),
        [
            ({"A", "B"}, ["B zeroes", "C zeroes"], ["D zeroes", "A zeroes"]),
            ("cd", ["D zeroes", "A zeroes"], ["B zeroes", "C zeroes"]),
            ({"a", "b", "c", "d"}, ["B zeroes", "D zeroes"], ["A zeroes", "C zeroes"]),
            ("B, D", ["B zeroes", "D zeroes", "A zeroes", "C zeroes"], []),
            ({"A"}, ["C zeroes"], ["A zeroes", "B zeroes", "D zeroes"]),
        ],
    )
    def test_each_mistake_is_named_and_only_those(self, answer, named, not_named):
        result = second_try(checkers_02.check_correct_loops, answer)
        assert not result.passed
        for fragment in named:
            assert fragment in result.message, (fragment, result.message)
        for fragment in not_named:
            assert fragment not in result.message, (fragment, result.message)

    @pytest.mark.parametrize(
        "answer", [{"A", "C"}, {"a", "c"}, ["c", "A"], "ac", "A and C", "a, C"]
    )
    def test_every_spelling_of_the_right_answer_passes(self, answer):
        assert checkers_02.check_correct_loops(answer).passed

    @pytest.mark.parametrize("answer", [None, 3, {"A", 3}, ..., {"E"}, "A, X"])
    def test_bad_answers_get_a_message_not_an_error(self, answer):
        result = checkers_02.check_correct_loops(answer)
        assert not result.passed and result.message
