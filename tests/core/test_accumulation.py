"""accumulate_gradients: exact against one big batch, for any split, tail and padding."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from helpers import accumulation
from helpers.accumulation import (
    accumulate_gradients,
    count_items,
    current_gradients,
    full_batch_gradients,
    tail_window_error,
    train_with_accumulation,
    windows,
)

VOCAB, WIDTH = 7, 5


def regression_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


class TokenModel(nn.Module):
    """Per-token logits: (batch, time) tokens -> (batch, vocab, time)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.out = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        return self.out(self.embed(tokens)).transpose(1, 2)


def split(tensor, sizes):
    return list(torch.split(tensor, sizes))


def assert_exact(model, reference):
    for got, expected in zip(current_gradients(model), reference, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


sizes = st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=5)


@settings(max_examples=40, deadline=None)
@given(sizes=sizes, reduction=st.sampled_from(["mean", "sum"]), seed=st.integers(0, 1000))
def test_samples_window_equals_one_batch(sizes, reduction, seed):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(sum(sizes), 3, generator=generator)
    targets = torch.randn(sum(sizes), 2, generator=generator)
    model = regression_model(seed)
    reference = full_batch_gradients(model, nn.MSELoss(), inputs, targets)
    loss_fn = nn.MSELoss(reduction=reduction)
    if reduction == "sum":  # MSE sums over the 2 outputs too: a constant factor
        reference = [g * 2 for g in reference]
    window = list(zip(split(inputs, sizes), split(targets, sizes), strict=True))
    accumulate_gradients(model, loss_fn, window, "samples")
    assert_exact(model, reference)


@st.composite
def padded_sequences(draw):
    count = draw(st.integers(2, 10))
    lengths = draw(st.lists(st.integers(0, 6), min_size=count, max_size=count))
    if sum(lengths) == 0:
        lengths[0] = 1
    seed = draw(st.integers(0, 1000))
    cut = sorted(set(draw(st.lists(st.integers(1, count - 1), max_size=4))))
    return lengths, seed, [b - a for a, b in zip([0, *cut], [*cut, count], strict=True)]


@settings(max_examples=40, deadline=None)
@given(case=padded_sequences(), reduction=st.sampled_from(["mean", "sum"]))
def test_tokens_window_equals_one_batch_with_padding(case, reduction):
    lengths, seed, sizes = case
    generator = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    tokens = torch.randint(0, VOCAB, (len(lengths), longest), generator=generator)
    targets = torch.randint(0, VOCAB, (len(lengths), longest), generator=generator)
    for row, length in enumerate(lengths):
        targets[row, length:] = -100  # padding
    model = TokenModel()
    # one batch, mean over its non-padding tokens: what the window must reproduce
    reference = full_batch_gradients(model, nn.CrossEntropyLoss(), tokens, targets)
    window = list(zip(split(tokens, sizes), split(targets, sizes), strict=True))
    accumulate_gradients(model, nn.CrossEntropyLoss(reduction=reduction), window, "tokens")
    assert_exact(model, reference)


def test_returns_the_window_loss_as_a_float():
    inputs, targets = torch.randn(5, 3), torch.randn(5, 2)
    model = regression_model()
    full = nn.MSELoss()(model(inputs), targets).item()
    window = [(inputs[:2], targets[:2]), (inputs[2:], targets[2:])]
    loss = accumulate_gradients(model, nn.MSELoss(), window)
    assert isinstance(loss, float) and loss == pytest.approx(full, rel=1e-6)


def test_accumulate_gradients_runs_the_core_notebook_03_shows(monkeypatch):
    """Notebook 03 prints backward_window's source: accumulate_gradients must really run it,
    with each micro-batch's count (samples: 2 and 3; non-padding tokens: 2 and 0)."""
    calls = []
    real = accumulation.backward_window

    def spy(model, loss_fn, window, counts, reduction, device):
        calls.append((len(window), list(counts), reduction))
        return real(model, loss_fn, window, counts, reduction, device)

    monkeypatch.setattr(accumulation, "backward_window", spy)
    inputs, targets = torch.randn(5, 3), torch.randn(5, 2)
    window = [(inputs[:2], targets[:2]), (inputs[2:], targets[2:])]
    loss = accumulate_gradients(regression_model(), nn.MSELoss(reduction="sum"), window)
    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])
    padded = [(tokens[:1], torch.tensor([[1, 2, -100]])), (tokens[1:], torch.full((1, 3), -100))]
    accumulate_gradients(TokenModel(), nn.CrossEntropyLoss(), padded, "tokens")
    assert calls == [(2, [2, 3], "sum"), (2, [2, 0], "mean")]
    full = nn.MSELoss(reduction="sum")(regression_model()(inputs), targets).item() / 5
    assert loss == pytest.approx(full, rel=1e-6)


def test_mean_of_means_is_what_the_helper_avoids():
    """A micro-batch of 1 and one of 4: the naive loss / k weights the single sample 2.5x."""
    inputs, targets = torch.randn(5, 3), torch.randn(5, 2)
    model = regression_model()
    reference = full_batch_gradients(model, nn.MSELoss(), inputs, targets)
    for x, y in [(inputs[:1], targets[:1]), (inputs[1:], targets[1:])]:
        (nn.MSELoss()(model(x), y) / 2).backward()
    naive = current_gradients(model)
    assert not all(torch.allclose(a, b, rtol=1e-3) for a, b in zip(naive, reference, strict=True))


def test_training_loop_steps_once_per_window_including_the_short_tail():
    model = regression_model()
    steps = []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.register_step_post_hook(lambda *_: steps.append(1))
    loader = [(torch.randn(2, 3), torch.randn(2, 2)) for _ in range(10)]
    losses = train_with_accumulation(model, nn.MSELoss(), loader, optimizer, 4)
    assert len(losses) == len(steps) == 3


def test_training_loop_equals_full_batch_sgd_on_each_window():
    data = [(torch.randn(3, 3), torch.randn(3, 2)) for _ in range(5)]
    accumulated, reference = regression_model(), regression_model()
    train_with_accumulation(
        accumulated, nn.MSELoss(), data, torch.optim.SGD(accumulated.parameters(), lr=0.1), 2
    )
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for window in windows(data, 2):
        optimizer.zero_grad()
        inputs = torch.cat([x for x, _ in window])
        targets = torch.cat([y for _, y in window])
        nn.MSELoss()(reference(inputs), targets).backward()
        optimizer.step()
    for a, b in zip(accumulated.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_windows_keep_the_tail():
    assert [len(w) for w in windows(range(10), 4)] == [4, 4, 2]
    assert [len(w) for w in windows(range(8), 4)] == [4, 4]
    with pytest.raises(ValueError, match="accumulation_steps must be at least 1"):
        list(windows(range(3), 0))


def test_count_items():
    targets = torch.tensor([[1, 2, -100], [3, -100, -100]])
    assert count_items(targets, "samples") == 2
    assert count_items(targets, "tokens") == 3
    assert count_items(targets, "tokens", ignore_index=3) == 5


class TestBadInput:
    def test_empty_window(self):
        with pytest.raises(ValueError, match="window is empty"):
            accumulate_gradients(regression_model(), nn.MSELoss(), [])

    def test_inputs_and_targets_disagree(self):
        with pytest.raises(ValueError, match="micro-batch 1 has 2 inputs but 3 targets"):
            window = [
                (torch.randn(2, 3), torch.randn(2, 2)),
                (torch.randn(2, 3), torch.randn(3, 2)),
            ]
            accumulate_gradients(regression_model(), nn.MSELoss(), window)

    def test_nothing_requires_grad(self):
        with pytest.raises(ValueError, match="no parameters that require grad"):
            model = regression_model().requires_grad_(False)
            accumulate_gradients(model, nn.MSELoss(), [(torch.randn(2, 3), torch.randn(2, 2))])

    def test_unknown_normalize(self):
        with pytest.raises(ValueError, match="normalize must be 'samples' or 'tokens'"):
            accumulate_gradients(
                regression_model(),
                nn.MSELoss(),
                [(torch.randn(2, 3), torch.randn(2, 2))],
                "batches",
            )

    def test_unknown_reduction(self):
        window = [(torch.randn(2, 3), torch.randn(2, 2))]
        with pytest.raises(TypeError, match="pass loss_reduction='mean' or 'sum'"):
            accumulate_gradients(regression_model(), lambda o, t: ((o - t) ** 2).mean(), window)
        with pytest.raises(ValueError, match="reduction='none'"):
            accumulate_gradients(regression_model(), nn.MSELoss(reduction="none"), window)

    def test_all_tokens_ignored(self):
        tokens, targets = torch.zeros(2, 3, dtype=torch.long), torch.full((2, 3), -100)
        with pytest.raises(ValueError, match="no targets to learn from"):
            accumulate_gradients(TokenModel(), nn.CrossEntropyLoss(), [(tokens, targets)], "tokens")

    def test_empty_loader(self):
        model = regression_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(ValueError, match="loader yielded no micro-batches"):
            train_with_accumulation(model, nn.MSELoss(), [], optimizer, 4)
        with pytest.raises(ValueError, match="accumulation_steps must be at least 1"):
            train_with_accumulation(model, nn.MSELoss(), [], optimizer, 0)


class TestTailWindowError:
    @pytest.fixture
    def data(self):
        generator = torch.Generator().manual_seed(0)
        return (
            regression_free_classifier(),
            torch.randn(100, 6, generator=generator),
            torch.randint(0, 3, (100,), generator=generator),
        )

    def test_exact_scaling_is_exact_and_dividing_by_k_is_not_with_a_short_tail(self, data):
        model, inputs, labels = data
        exact = tail_window_error(model, inputs, labels, 16, 4, "exact")
        article = tail_window_error(model, inputs, labels, 16, 4, "divide by k")
        # 100 samples in micro-batches of 16: 7 micro-batches (the last of 4), windows 4 + 3
        assert exact["windows"] == 2 and exact["micro-batches in the last window"] == 3
        assert exact["samples in the last window"] == 36 and exact["effective batch"] == 64
        assert exact["gradient error"] < 1e-5 < 0.1 < article["gradient error"]

    def test_bad_input(self, data):
        model, inputs, labels = data
        with pytest.raises(ValueError, match="scaling must be one of"):
            tail_window_error(model, inputs, labels, 16, 4, "mean")
        with pytest.raises(ValueError, match="accumulation_steps must be at least 1"):
            tail_window_error(model, inputs, labels, 16, 0)


def regression_free_classifier():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


class TestLossesItRefusesOrAdapts:
    def test_reads_the_losss_own_ignore_index(self):
        tokens = torch.randint(0, VOCAB, (6, 5), generator=torch.Generator().manual_seed(1))
        targets = torch.randint(0, VOCAB, (6, 5), generator=torch.Generator().manual_seed(2))
        targets[:3, 2:] = 0  # padding marked with 0 this time
        loss_fn = nn.CrossEntropyLoss(ignore_index=0)
        model = TokenModel()
        reference = full_batch_gradients(model, loss_fn, tokens, targets)
        window = list(zip(split(tokens, [1, 2, 3]), split(targets, [1, 2, 3]), strict=True))
        accumulate_gradients(model, loss_fn, window, "tokens")
        assert_exact(model, reference)
        with pytest.raises(ValueError, match="must agree"):
            accumulate_gradients(model, loss_fn, window, "tokens", ignore_index=-100)

    def test_class_weights_are_refused(self):
        loss_fn = nn.CrossEntropyLoss(weight=torch.ones(VOCAB))
        window = [(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))]
        with pytest.raises(ValueError, match="class weights"):
            accumulate_gradients(TokenModel(), loss_fn, window, "tokens")

    def test_padded_targets_need_token_normalization(self):
        targets = torch.tensor([[1, -100], [2, 3]])
        window = [(torch.zeros(2, 2, dtype=torch.long), targets)]
        with pytest.raises(ValueError, match="use normalize='tokens'"):
            accumulate_gradients(TokenModel(), nn.CrossEntropyLoss(), window, "samples")
