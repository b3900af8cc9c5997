"""helpers/gradient_accumulation/everyday_training.py: a schedule stepped once per optimizer step,
and the article's comparison counted in updates."""

import pytest
import torch
from matplotlib.figure import Figure
from torch import nn

from helpers.gradient_accumulation.everyday_training import (
    UpdateCurve,
    plot_updates_and_epochs,
    train_counting_updates,
    train_with_schedule,
)
from helpers.models import make_mlp


def loader(micro_batches=10, size=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(micro_batches * size, 6, generator=generator)
    labels = torch.randint(0, 3, (micro_batches * size,), generator=generator)
    return list(zip(inputs.split(size), labels.split(size), strict=True))


def schedule_run(total_steps=None, epochs=3, k=4, scheduler=None, on_step=None):
    model = make_mlp((6, 8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if on_step is not None:
        optimizer.register_step_post_hook(on_step)
    if scheduler is None:
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=total_steps)
    else:
        scheduler = scheduler(optimizer)
    run = (model, nn.CrossEntropyLoss(), loader(), optimizer, scheduler, k, epochs)
    return train_with_schedule(*run), scheduler


def test_the_scheduler_steps_once_per_optimizer_step_the_short_window_included():
    steps = []
    lrs, scheduler = schedule_run(9, on_step=lambda *_: steps.append(1))
    # 10 micro-batches, k = 4: windows of 4, 4 and 2, so 3 steps per epoch
    assert len(lrs) == len(steps) == scheduler.last_epoch == 9
    assert lrs[-1] < 1e-5 and lrs[0] < lrs[2] > lrs[-1]


def test_a_schedule_counted_in_micro_batches_ends_training_at_its_peak():
    lrs, _ = schedule_run(30)
    assert len(lrs) == 9 and lrs[-1] == pytest.approx(0.1, abs=1e-9)


def test_a_schedule_that_forgets_the_short_windows_is_refused_by_onecyclelr():
    with pytest.raises(ValueError, match="Tried to step 7 times"):
        schedule_run(6)


def test_the_learning_rates_are_those_each_step_used():
    lrs, _ = schedule_run(
        scheduler=lambda opt: torch.optim.lr_scheduler.LinearLR(opt, 0.25, total_iters=3)
    )
    assert lrs[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])


def test_train_with_schedule_refuses_bad_input():
    model = make_mlp((6, 8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 0.5, total_iters=2)
    run = [model, nn.CrossEntropyLoss(), loader(), optimizer, scheduler, 4, 2]
    with pytest.raises(TypeError, match="iterator"):
        train_with_schedule(*run[:2], iter(loader()), *run[3:])
    with pytest.raises(TypeError, match=r"torch\.optim\.Optimizer"):
        train_with_schedule(*run[:3], "sgd", *run[4:])
    with pytest.raises(ValueError, match="epochs must be at least 1"):
        train_with_schedule(*run[:6], 0)
    with pytest.raises(TypeError, match="loader must be"):
        train_with_schedule(*run[:2], "batches", *run[3:])


@pytest.fixture(scope="module")
def article_runs():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(100, 20, generator=generator)
    labels = torch.randint(0, 4, (100,), generator=generator)
    model = make_mlp((20, 16, 4))
    return {
        k: train_counting_updates(
            model, inputs, labels, k, epochs=3, batch_size=8, lr=0.05, checkpoint_every=2
        )
        for k in (1, 4)
    }, model


def test_updates_are_counted_per_window_with_the_short_ones(article_runs):
    runs, _ = article_runs
    # 100 samples in micro-batches of 8: 13 per epoch (the last of 4); k = 4: 4 windows
    (_, one), (_, four) = runs[1], runs[4]
    assert one.updates[-1] == 3 * 13 and four.updates[-1] == 3 * 4
    assert one.at_epoch_ends().keys() == four.at_epoch_ends().keys() == {0, 1, 2, 3}
    assert four.updates == [0, 2, 4, 6, 8, 10, 12]  # checkpoints every 2, epoch ends at 4, 8
    assert one.loss_after(0) == four.loss_after(0)  # the same starting model
    with pytest.raises(ValueError, match="no checkpoint after 5 updates"):
        four.loss_after(5)


def test_the_trained_copy_is_returned_and_the_model_left_alone(article_runs):
    runs, model = article_runs
    trained, _ = runs[1]
    original = make_mlp((20, 16, 4))
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), original.parameters(), strict=True)
    )
    assert not all(
        torch.equal(a, b) for a, b in zip(trained.parameters(), model.parameters(), strict=True)
    )


def test_per_epoch_the_runs_differ_per_update_they_are_close(article_runs):
    runs, _ = article_runs
    (_, one), (_, four) = runs[1], runs[4]
    assert one.at_epoch_ends()[3] < four.at_epoch_ends()[3]
    for updates in four.updates:
        assert abs(one.loss_after(updates) - four.loss_after(updates)) < 0.1


def test_train_counting_updates_refuses_bad_input():
    model = make_mlp((20, 16, 4))
    with pytest.raises(ValueError, match="same length"):
        train_counting_updates(model, torch.randn(5, 20), torch.zeros(4, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="accumulation_steps must be at least 1"):
        train_counting_updates(model, torch.randn(5, 20), torch.zeros(5, dtype=torch.long), 0)


def test_plot_updates_and_epochs(article_runs):
    runs, _ = article_runs
    fig = plot_updates_and_epochs({f"k = {k}": curve for k, (_, curve) in runs.items()})
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]
    with pytest.raises(ValueError, match="non-empty dict"):
        plot_updates_and_epochs({})
    with pytest.raises(TypeError, match="must be an UpdateCurve"):
        plot_updates_and_epochs({"k = 1": [1.0, 2.0]})
    assert UpdateCurve(1).losses == []
