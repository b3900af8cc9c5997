"""Each rule of the loop auditor alone, on plain numbers: it fires on what it is about, stays
silent otherwise, and its message says what happened and the fix; and bad input to the
auditor is refused with what to pass instead."""

import pytest

from loop_auditor import CODES, LoopAuditor, rules
from loop_auditor.findings import check_codes
from loop_auditor.session import AuditSession


def windows(*sizes):
    return [(step, n) for step, n in enumerate(sizes, start=1)]


@pytest.mark.parametrize(
    ("sizes", "k", "declared"),
    [
        ((4, 4, 2), 4, True),  # a short tail
        ((4, 4, 2, 4, 4, 2), 4, True),  # one per epoch
        ((2, 2, 2), 1, False),  # not declared: a GAN's discriminator, real and fake
        ((2, 1, 2, 1), 1, False),  # not declared: one or two backward calls per step
        ((1, 1, 1), 1, True),
        ((3,), 4, True),  # one window: nothing to compare
    ],
)
def test_window_length_accepts_full_windows_and_one_short_tail(sizes, k, declared):
    assert rules.window_length(windows(*sizes), k, declared) is None


@pytest.mark.parametrize(
    ("sizes", "k", "step", "says"),
    [
        ((1, 4, 4), 4, 1, "off-by-one"),
        ((4, 4, 6, 4), 4, 3, "ran into the next one"),
        ((4, 2, 2, 4), 4, 3, "right after another short window"),
        ((2, 1, 1), 4, 1, "fix the counter"),
        ((3, 3, 3), 4, 1, "accumulation_steps=3"),
        ((8, 8, 4), 4, 1, "declare the backward passes per window: accumulation_steps=8"),
        ((2, 2, 2), 1, 1, "accumulation_steps=2"),  # declared 1
    ],
)
def test_window_length_reports_the_first_bad_window_with_the_sizes(sizes, k, step, says):
    finding = rules.window_length(windows(*sizes), k)
    assert finding.code == "window-length" and finding.step == step
    assert says in finding.message and ", ".join(map(str, sizes)) in finding.message


def test_window_length_shows_at_most_twelve_sizes():
    finding = rules.window_length(windows(1, *[4] * 20), 4)
    assert "1, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, ..." in finding.message


def test_discarded_passes_before_a_full_window_are_a_zeroed_tail():
    finding = rules.discarded_passes(7, lost=[10, 11], kept=[12, 13, 14, 15], k=4)
    assert finding.code == "leftover-gradients" and "2 backward pass(es)" in finding.message


@pytest.mark.parametrize(
    ("lost", "kept", "k"),
    [([10, 11, 12], [13], 4), ([10], [11], 1), ([10, 12], [11, 13, 14, 15], 4)],
)
def test_discarded_passes_inside_a_window_are_a_zero_grad_before_step(lost, kept, k):
    finding = rules.discarded_passes(3, lost=lost, kept=kept, k=k)
    assert finding.code == "zero-grad-before-step"
    assert "allow=['zero-grad-before-step']" in finding.message


def test_nothing_discarded_is_no_finding():
    assert rules.discarded_passes(3, lost=[], kept=[1, 2], k=2) is None


def test_missing_zero_grad_counts_the_stale_parameters():
    assert rules.missing_zero_grad(2, 0, 10, 1) is None
    finding = rules.missing_zero_grad(2, 3, 10, 4)
    assert "3 of 10 parameters" in finding.message and "zero_grad() after every step" in (
        finding.message
    )
    assert "(accumulation_steps=4)" in finding.message


def test_missing_zero_grad_in_a_closure_is_fixed_inside_the_closure():
    finding = rules.missing_zero_grad(2, 3, 10, 1, closure="LBFGS")
    assert "LBFGS may call the closure several times in one step()" in finding.message
    assert finding.message.endswith(
        "call optimizer.zero_grad() inside the closure, before loss.backward()."
    )
    assert "after every step" not in finding.message


@pytest.mark.parametrize(
    "finding",
    [
        rules.missing_zero_grad(2, 3, 10, 1),
        rules.discarded_passes(3, lost=[10], kept=[11], k=1),
    ],
)
def test_no_accumulation_count_is_quoted_without_accumulation(finding):
    """accumulation_steps=1 (not given, or no accumulation) is not the window a GAN's
    discriminator steps on (2 backward passes): the message does not quote it."""
    assert "accumulation_steps" not in finding.message.split("If this is intended")[0]


def test_a_zero_grad_between_losses_without_accumulation_is_named_so():
    finding = rules.discarded_passes(3, lost=[10], kept=[11], k=1)
    assert "a zero_grad() between the losses of one step" in finding.message
    assert "Zero the gradients once per step, right after step()." in finding.message
    finding = rules.discarded_passes(3, lost=[10], kept=[11], k=4)
    assert "inside the accumulation window (accumulation_steps=4)" in finding.message


@pytest.mark.parametrize(
    ("rule", "none_says", "zeros_says"),
    [
        (rules.reset_after_last_backward, "skipped every parameter", "weight decay"),
        (rules.step_without_grad, "nothing was updated", "weight decay"),
    ],
)
def test_none_and_zero_gradients_are_told_apart(rule, none_says, zeros_says):
    assert none_says in rule(4, all_none=True).message
    assert zeros_says in rule(4, all_none=False).message


def test_cross_network_leak_names_the_other_network_and_both_fixes():
    finding = rules.cross_network_leak(3, 1, "optimizer 2 (Adam)")
    assert finding.code == "cross-network-leak" and "optimizer 2 (Adam)" in finding.message
    assert "detach()" in finding.message and "requires_grad_(False)" in finding.message


def test_cross_network_leak_leads_with_the_fix_for_where_the_loss_went():
    # the other's loss reached this network first, on its way to the other (G's loss in D)
    through = rules.cross_network_leak(3, 1, "optimizerG", reached_first=True).message
    assert "that optimizerG had already stepped on" in through
    assert (
        "Zero this optimizer's gradients right before this network's own first backward()"
        in through
    )
    assert "detach" not in through
    # the other's loss flowed back into this network through its output (D's loss in G)
    back = rules.cross_network_leak(3, 1, "optimizerD", reached_first=False).message
    assert "Detach this network's output where that loss uses it (D(fake.detach()))" in back
    assert back.index("Detach") < back.index("zero this optimizer's gradients")


def test_the_remaining_rules_fire_only_past_their_threshold():
    assert rules.scheduler_per_micro_batch(3, 1) is None
    assert "4 times" in rules.scheduler_per_micro_batch(3, 4).message
    named = rules.scheduler_per_micro_batch(3, 4, "scheduler.step() (StepLR)").message
    assert named.startswith("scheduler.step() (StepLR) ran 4 times")
    assert "once per epoch" in named and "right after each optimizer.step()" in named
    assert rules.graph_kept_alive(5, [0, 1]) is None
    assert rules.graph_kept_alive(5, [0, 1, 2]).code == "graph-kept-alive"
    assert rules.params_not_in_optimizer(1, []) is None
    names = [f"layer{i}.weight" for i in range(6)]
    assert "layer3.weight, ..." in rules.params_not_in_optimizer(1, names).message
    assert "(1024)" in rules.unscale_after_clip(2, "clip_grad_norm_", 1024.0).message
    assert "Clip once" in rules.clip_per_micro_batch(2).message
    assert "step once more" in rules.leftover_at_end(2, 5, 4).message
    assert "step() after the last backward()" in rules.leftover_at_end(1, 5, 1).message


def test_params_not_in_optimizer_without_a_model_names_no_model_and_no_optimizer():
    """The session's finding for parameters that no optimizer's model holds."""
    names = ["teacher.weight", "a float32 parameter of shape (1,)"]
    assert rules.params_not_in_optimizer(None, [], model_known=False) is None
    finding = rules.params_not_in_optimizer(None, names, model_known=False)
    assert finding.code == "params-not-in-optimizer" and finding.step is None
    assert finding.message.startswith(
        "2 parameter(s) received gradients in backward() but belong to no param group of any "
        "optimizer, so no step() updates them: teacher.weight, a float32 parameter of shape "
        "(1,). "
    )
    assert "of the model" not in finding.message and "of the optimizer" not in finding.message
    assert "add_param_group()" in finding.message and "requires_grad_(False)" in finding.message


def test_every_rule_reports_a_known_code():
    made = [
        rules.window_length(windows(1, 4), 4),
        rules.discarded_passes(1, [1], [2], 1),
        rules.missing_zero_grad(1, 1, 1, 1),
        rules.reset_after_last_backward(1, True),
        rules.step_without_grad(1, True),
        rules.cross_network_leak(1, 1, "D"),
        rules.scheduler_per_micro_batch(1, 2),
        rules.clip_per_micro_batch(1),
        rules.unscale_after_clip(1, "clip_grad_norm_", 2.0),
        rules.graph_kept_alive(1, [0, 1, 2]),
        rules.params_not_in_optimizer(1, ["w"]),
        rules.leftover_at_end(1, 1, 2),
    ]
    assert {f.code for f in made} == set(CODES)


@pytest.mark.parametrize(
    ("codes", "error", "match"),
    [
        ("zero-grad-before-step", TypeError, r"not one string: allow=\['zero-grad-before-step'\]"),
        (["zero-grad-befor-step"], ValueError, "unknown code.*the codes are: missing-zero-grad"),
        (3, TypeError, "a list of codes"),
    ],
)
def test_allow_lists_are_checked(codes, error, match):
    with pytest.raises(error, match=match):
        check_codes(codes)


# ------------------------------------------------------------------- bad input
def _model_and_optimizer():
    import torch
    from torch import nn

    model = nn.Linear(2, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


class _NotAnOptimizer:
    def __init__(self):
        self.optimizer = "not an optimizer either"


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda m, o: LoopAuditor(m, {"lr": 0.1}), TypeError, "or the wrapper Accelerate"),
        (lambda m, o: LoopAuditor(m, _NotAnOptimizer()), TypeError, "got _NotAnOptimizer"),
        (lambda m, o: LoopAuditor(m, o, scheduler=o), TypeError, "lr_scheduler scheduler"),
        (lambda m, o: LoopAuditor(m, o, allow=["leftover"]), ValueError, "unknown code"),
        (lambda m, o: LoopAuditor(m, o, allow="window-length"), TypeError, "not one string"),
        (lambda m, o: LoopAuditor(m, o, name=3), TypeError, "name must be a string"),
        (lambda m, o: LoopAuditor(m, o, accumulation_steps=0), ValueError, "1 or more"),
        (lambda m, o: AuditSession(accumulation_steps=-1), ValueError, "1 or more"),
        (lambda m, o: AuditSession(accumulation_steps="4"), TypeError, "an int"),
        (lambda m, o: AuditSession(allow=["nope"]), ValueError, "unknown code"),
    ],
)
def test_bad_input_is_refused_with_what_to_pass(make, error, match):
    model, optimizer = _model_and_optimizer()
    with pytest.raises(error, match=match):
        make(model, optimizer)


def test_a_scope_must_name_known_codes():
    model, optimizer = _model_and_optimizer()
    with LoopAuditor(model, optimizer) as audit:
        with pytest.raises(ValueError, match="name the code"), audit.allow():
            pass
        with pytest.raises(ValueError, match="unknown code"), audit.allow("zero-grad"):
            pass
