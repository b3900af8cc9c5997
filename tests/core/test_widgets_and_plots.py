"""The explorers' wiring and the figures, without a browser."""

import ipywidgets as widgets
import pytest
from matplotlib.figure import Figure

from helpers.data import make_article_setup, split_batches
from helpers.plots import plot_function_and_gradient, plot_loss_curves
from helpers.training import History, compare_zero_grad
from helpers.widgets import square_gradient_slider, zero_grad_explorer


@pytest.fixture(scope="module")
def article():
    inputs, targets, model = make_article_setup()
    return model, split_batches(inputs, targets, 20)


def test_zero_grad_explorer_recomputes_when_a_control_moves(article):
    explorer = zero_grad_explorer(*article)
    lr, steps, show = explorer.children[:3]
    assert isinstance(lr, widgets.FloatLogSlider) and isinstance(steps, widgets.IntSlider)
    assert isinstance(show, widgets.Checkbox)
    assert lr.value == pytest.approx(0.01) and steps.value == 200
    assert explorer.result["without zero_grad"] < 10
    lr.value = 0.1
    assert explorer.result["without zero_grad"] > 1e12
    steps.value = 10
    assert explorer.result["without zero_grad"] < 10


def test_square_gradient_slider_recomputes():
    slider = square_gradient_slider()
    assert slider.result == 2.0
    slider.children[0].value = -1.5
    assert slider.result == -3.0
    assert slider.kwargs == {"w": -1.5}  # what notebook 00 reads to check the moved slider


def test_explorer_rejects_a_model_without_parameters(article):
    import torch

    with pytest.raises(ValueError, match="no parameters that require grad"):
        zero_grad_explorer(torch.nn.ReLU(), article[1])


def test_loss_curves_draw_one_line_per_run(article):
    runs = compare_zero_grad(*article, steps=10, lr=0.01)
    drawn = plot_loss_curves(runs, title="t", log_y=True)
    assert isinstance(drawn.figure, Figure)
    assert drawn.description.splitlines()[1].startswith("with zero_grad: ")
    ax = drawn.figure.axes[0]
    assert [line.get_label() for line in ax.lines] == list(runs)
    assert ax.get_yscale() == "log"
    assert len(ax.lines[0].get_xdata()) == 10


def test_plots_reject_bad_input():
    with pytest.raises(ValueError, match="non-empty dict"):
        plot_loss_curves({})
    with pytest.raises(TypeError, match="must be a History"):
        plot_loss_curves({"run": [1.0, 2.0]})
    import torch

    with pytest.raises(ValueError, match="same number of elements"):
        plot_function_and_gradient(torch.zeros(3), torch.zeros(3), torch.zeros(4))
    assert History().steps == 0


def test_accumulation_explorer_reports_and_recomputes(capsys):
    import torch
    from torch import nn

    from helpers.memory import StepMemory
    from helpers.widgets import accumulation_explorer

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    inputs, labels = torch.randn(100, 6), torch.randint(0, 3, (100,))
    points = [StepMemory(16, 3 * 2**20, 2**20), StepMemory(32, 5 * 2**20, 2**20)]
    explorer = accumulation_explorer(model, inputs, labels, points)
    size, steps, scaling = explorer.children[:3]
    assert explorer.result["effective batch"] == 64 and explorer.result["gradient error"] < 1e-5
    assert explorer.result["step memory (MiB)"] == 3.0
    scaling.value = "divide by k"
    assert explorer.result["gradient error"] > 0.1
    shown = capsys.readouterr().out
    assert "gradient error                    < 1e-5" in shown  # noise: its bound, exact scaling
    assert f"gradient error                    {explorer.result['gradient error']:.3g}" in shown
    steps.value = 1  # one micro-batch per window: dividing by k = 1 is exact
    assert explorer.result["gradient error"] < 1e-5
    size.value = 32
    assert explorer.result["step memory (MiB)"] == 5.0 and explorer.result["effective batch"] == 32
    with pytest.raises(ValueError, match="memory_points is empty"):
        accumulation_explorer(model, inputs, labels, [])


def test_tail_error_figure():
    from helpers.plots import plot_tail_errors

    fig = plot_tail_errors({"exact": {1: 0.0, 2: 0.0}, "divide by k": {1: 0.0, 2: 0.5}})
    assert [line.get_label() for line in fig.axes[0].lines] == ["exact", "divide by k"]
    with pytest.raises(ValueError):
        plot_tail_errors({})


def test_the_function_and_its_gradient_are_described():
    import torch

    x = torch.linspace(-2, 2, 5, requires_grad=True)
    y = x**2
    y.sum().backward()
    drawn = plot_function_and_gradient(x, y, x.grad, name="x²")
    assert isinstance(drawn.figure, Figure) and len(drawn.figure.axes[0].lines) == 2
    assert drawn.description == (
        "Figure: x² and its gradient from autograd, for x from -2 to 2.\n"
        "x² ranges from 0 to 4; its gradient from -4 to 4"
    )


def test_show_source_numbers_its_lines(capsys):
    from helpers.audit_and_repair.script_review import numbered_lines, train
    from helpers.source import show_source

    show_source(train, numbered=True)
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == len(numbered_lines())
    assert shown[0] == f"  1  {numbered_lines()[1]}"
