"""What notebooks 03 and 07 say about Lightning, Accelerate and the Hugging Face Trainer, checked
against the real libraries (the versions constraints.txt pins), in real runs on the CPU with
tiny models built here, nothing downloaded; each of ``helpers/at_scale/frameworks.py``'s mirrors is
run on the same inputs as the library it mirrors. The last tests check that every quote the
notebooks attribute to a framework's source file is in that file, as installed, and that no notebook
imports a framework (learners do not need them).

The 2-process Trainer run starts this module as its ranks:
``python -m tests.at_scale.test_frameworks_real --out=FILE`` under
``helpers.processes.run_ranks.launch``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import re
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from helpers.accumulation import accumulate_gradients, current_gradients, relative_error, windows
from helpers.at_scale.frameworks import (
    divide_by_k_gradients,
    mean_of_means_gradients,
    num_items_gradients,
    steps_after,
    trainer_fallback_gradients,
)
from helpers.data import make_padded_tokens, make_teacher_batches
from helpers.models import TokenModel, make_mlp

pytestmark = pytest.mark.frameworks
# Installed by requirements-test.txt; a machine without them (the GPU suite's) skips the module.
# Found, not imported: each test imports what it runs, so that only the test process that
# runs this module pays for importing them (seconds), not every pytest-xdist worker.
_MISSING = [
    name
    for name in ("lightning", "accelerate", "transformers")
    if not importlib.util.find_spec(name)
]
if _MISSING:
    pytest.skip(f"needs {', '.join(_MISSING)} (requirements-test.txt)", allow_module_level=True)


def torch_too_old_for_the_frameworks(installed: str) -> str | None:
    """Why the pinned frameworks cannot run on torch ``installed``, read from their own
    requirements (transformers' ``torch`` extra: torch>=2.6), or None when they can."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    version = Version(Version(installed).base_version)
    for name in ("lightning", "accelerate", "transformers"):
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.name != "torch":
                continue
            if requirement.marker and not requirement.marker.evaluate({"extra": "torch"}):
                continue
            if not requirement.specifier.contains(version, prereleases=True):
                return (
                    f"{name} {importlib.metadata.version(name)} needs "
                    f"torch{requirement.specifier}, and this is torch {installed}"
                )
    return None


if reason := torch_too_old_for_the_frameworks(torch.__version__):
    pytest.skip(reason, allow_module_level=True)


def test_the_torch_the_frameworks_need_is_read_from_their_requirements():
    assert torch_too_old_for_the_frameworks(torch.__version__) is None
    assert torch_too_old_for_the_frameworks("2.5.1+cu124") == (
        f"transformers {importlib.metadata.version('transformers')} needs torch>=2.6, "
        "and this is torch 2.5.1+cu124"
    )


ROOT = Path(__file__).resolve().parents[2]
K = 4
N_BATCHES = 10  # windows of 4, 4 and a short last one of 2


def flat(gradients):
    return torch.cat([g.flatten() for g in gradients])


def regression_batches():
    """Notebook 07's batches (section 2 onwards): 10 micro-batches of 16 samples."""
    return make_teacher_batches(n_batches=N_BATCHES, batch_size=16, features=8)


def regression_model():
    return make_mlp((8, 64, 64, 1))


# 8 sequences: notebook 07's window of 4 micro-batches; 20: windows of 4, 4 and 2.
TOKEN_RUNS = pytest.mark.parametrize("n_sequences", [8, 2 * N_BATCHES])


def token_data(n_sequences=2 * N_BATCHES):
    """Padded token sequences of random lengths, in micro-batches of 2 (notebook 07's)."""
    tokens, targets, _ = make_padded_tokens(n_sequences, 6, seed=3)
    return tokens, targets, list(zip(tokens.split(2), targets.split(2), strict=True))


def one_batch_token_gradients(model, window):
    """The independent reference: the whole window as one batch, its mean token loss over all
    its counted tokens at once."""
    model.zero_grad()
    tokens = torch.cat([inputs for inputs, _ in window])
    targets = torch.cat([targets for _, targets in window])
    F.cross_entropy(model(tokens), targets, ignore_index=-100).backward()
    return current_gradients(model)


def exact_gradients(model, window, normalize="samples"):
    model.zero_grad()
    loss_fn = nn.CrossEntropyLoss() if normalize == "tokens" else nn.MSELoss()
    accumulate_gradients(model, loss_fn, window, normalize)
    return current_gradients(model)


def assert_windows(captured, batches, mirror):
    """Every optimizer step of a real run (micro-batches seen, gradient) against the mirror on
    the same window; the learning rate is 0, so every window sees the initial weights."""
    assert [seen for seen, _ in captured] == steps_after(len(batches), K)
    for (_, got), window in zip(captured, windows(batches, K), strict=True):
        torch.testing.assert_close(flat(got), flat(mirror(window)), rtol=1e-5, atol=1e-7)


def short_window_share(got, model, window):
    """What share of the short last window's exact mean gradient a run gave it."""
    exact = flat(exact_gradients(model, window))
    torch.testing.assert_close(flat(got) / flat(got).norm(), exact / exact.norm())  # parallel
    return (flat(got).norm() / exact.norm()).item()


# ------------------------------------------------------------------ Lightning
def not_stepped(n_batches=N_BATCHES):
    """The micro-batches after which no step is taken: those run without synchronizing."""
    return [i for i in range(1, n_batches + 1) if i not in steps_after(n_batches, K)]


@pytest.mark.filterwarnings("ignore")
def test_lightning_divides_by_k_and_steps_the_short_last_window(tmp_path, monkeypatch):
    lightning = pytest.importorskip("lightning")
    from lightning.pytorch.loops.optimization import automatic

    batches = regression_batches()
    blocked, blocking = [], automatic._block_parallel_sync_behavior

    def counting_block(strategy, block=True):  # DDP's no_sync under a ParallelStrategy
        blocked.append(module.seen + 1)  # the micro-batch about to run in it
        return blocking(strategy, block=block)

    monkeypatch.setattr(automatic, "_block_parallel_sync_behavior", counting_block)

    class Regression(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net, self.seen, self.captured = regression_model(), 0, []

        def training_step(self, batch, _):
            self.seen += 1
            inputs, targets = batch
            return F.mse_loss(self.net(inputs), targets)

        def on_before_optimizer_step(self, optimizer):
            self.captured.append((self.seen, current_gradients(self.net)))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    inputs, targets = (torch.cat(part) for part in zip(*batches, strict=True))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(inputs, targets), batch_size=16, shuffle=False
    )
    module = Regression()
    trainer = lightning.Trainer(
        accelerator="cpu", max_epochs=1, accumulate_grad_batches=K, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, loader)
    assert blocked == not_stepped()
    model = regression_model()
    assert_windows(
        module.captured, batches, lambda w: divide_by_k_gradients(model, F.mse_loss, w, K)
    )
    tail = list(windows(batches, K))[-1]
    assert len(tail) == 2 and short_window_share(module.captured[-1][1], model, tail) == (
        pytest.approx(0.5, abs=1e-5)
    )


# ------------------------------------------------------------------ Accelerate
def reset_accelerate():
    """Accelerate (and the Trainer, through it) keeps its state in singletons: clear them."""
    if "accelerate.state" in sys.modules:
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


@pytest.fixture(autouse=True)
def clean_accelerate_state():
    yield
    reset_accelerate()


@contextlib.contextmanager
def fresh_accelerator(k, tmp_path, monkeypatch):
    """A real Accelerator(gradient_accumulation_steps=k) on the CPU from a clean state."""
    accelerate = pytest.importorskip("accelerate")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    reset_accelerate()
    yield accelerate.Accelerator(gradient_accumulation_steps=k, cpu=True)


def accelerate_run(accelerator, batches, prepare_loader):
    """The loop of Accelerate's docs: every micro-batch inside accumulate(), with
    optimizer.step() and zero_grad() every time; the real steps are recorded by a hook on the
    wrapped torch optimizer, so a step() that does nothing is not recorded."""
    model = regression_model()
    torch_optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    captured, seen = [], [0]
    torch_optimizer.register_step_pre_hook(
        lambda *_: captured.append((seen[0], current_gradients(model)))
    )
    inputs, targets = (torch.cat(part) for part in zip(*batches, strict=True))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(inputs, targets), batch_size=16, shuffle=False
    )
    if prepare_loader:
        model, optimizer, loader = accelerator.prepare(model, torch_optimizer, loader)
    else:
        model, optimizer = accelerator.prepare(model, torch_optimizer)
    unsynced, no_sync = [], accelerator.no_sync

    def counting_no_sync(model):
        unsynced.append(seen[0])
        return no_sync(model)

    accelerator.no_sync = counting_no_sync
    for inputs, targets in loader:
        seen[0] += 1
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(inputs), targets))
            optimizer.step()
            optimizer.zero_grad()
    return captured, unsynced


def test_accelerate_divides_by_k_and_steps_the_short_last_window(tmp_path, monkeypatch):
    batches = regression_batches()
    with fresh_accelerator(K, tmp_path, monkeypatch) as accelerator:
        captured, unsynced = accelerate_run(accelerator, batches, prepare_loader=True)
    assert unsynced == not_stepped()  # accumulate() entered no_sync
    model = regression_model()
    assert_windows(captured, batches, lambda w: divide_by_k_gradients(model, F.mse_loss, w, K))
    tail = list(windows(batches, K))[-1]
    assert short_window_share(captured[-1][1], model, tail) == pytest.approx(0.5, abs=1e-5)


def test_accelerate_knows_the_end_only_of_a_prepared_dataloader(tmp_path, monkeypatch):
    with fresh_accelerator(K, tmp_path, monkeypatch) as accelerator:
        captured, _ = accelerate_run(accelerator, regression_batches(), prepare_loader=False)
    assert [seen for seen, _ in captured] == [4, 8]  # the last 2 micro-batches never stepped


# ------------------------------------------------------------- the HF Trainer
class TokenLoss(nn.Module):
    """The course's TokenModel as a Trainer model whose forward takes loss kwargs, with
    Transformers' own token loss (``fixed_cross_entropy``: with ``num_items_in_batch`` it sums
    the token losses and divides by it, without it it takes the mean)."""

    def __init__(self):
        super().__init__()
        self.net = TokenModel()

    def forward(self, input_ids, labels=None, **kwargs):
        from transformers.loss.loss_utils import fixed_cross_entropy

        logits = self.net(input_ids)
        if labels is None:  # with a compute_loss_func the Trainer keeps the labels for it
            return {"logits": logits}
        return {"loss": fixed_cross_entropy(logits, labels, **kwargs), "logits": logits}


class TokenLossNoKwargs(TokenLoss):
    """The same model, its forward without ``**kwargs``: the Trainer does not count items."""

    def forward(self, input_ids, labels=None):
        return super().forward(input_ids, labels)


class RegressionNoKwargs(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = regression_model()

    def forward(self, inputs, labels=None):
        return {"loss": F.mse_loss(self.net(inputs), labels)}


def trainer_run(model, samples, k=K, micro_batch=2, compute_loss_func=None, **options):
    """A real ``Trainer`` for one epoch in order (``train_sampling_strategy="sequential"``),
    learning rate 0, no clipping; returns the Trainer and, for each optimizer step, the
    micro-batches seen on this process and the gradient (after DDP's all-reduce)."""
    transformers = pytest.importorskip("transformers")
    seen, captured = [0], []
    model.register_forward_pre_hook(lambda *_: seen.__setitem__(0, seen[0] + 1))

    class Capture(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            captured.append((seen[0], current_gradients(model)))

    with tempfile.TemporaryDirectory() as folder:
        args = transformers.TrainingArguments(
            output_dir=folder, per_device_train_batch_size=micro_batch,
            gradient_accumulation_steps=k, num_train_epochs=1, learning_rate=0.0, optim="sgd",
            lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0, use_cpu=True,
            train_sampling_strategy="sequential", report_to="none", save_strategy="no",
            logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0, **options,
        )  # fmt: skip
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=samples, callbacks=[Capture()],
            compute_loss_func=compute_loss_func,
        )  # fmt: skip
        trainer.train()
    return trainer, captured


def token_samples(tokens, targets):
    return [{"input_ids": t, "labels": y} for t, y in zip(tokens, targets, strict=True)]


@TOKEN_RUNS
def test_trainer_with_loss_kwargs_counts_the_windows_tokens_exactly(n_sequences):
    tokens, targets, batches = token_data(n_sequences)
    trainer, captured = trainer_run(TokenLoss(), token_samples(tokens, targets))
    assert trainer.model_accepts_loss_kwargs
    model = TokenModel()
    assert_windows(captured, batches, lambda w: num_items_gradients(model, w))
    for (_, got), window in zip(captured, windows(batches, K), strict=True):  # short one too
        assert relative_error(got, one_batch_token_gradients(model, window)) < 1e-6


def test_trainer_with_a_transformers_causal_lm_counts_shifted_tokens():
    """A tiny LlamaForCausalLM (built from its config): its loss predicts token i + 1 from
    the tokens up to i, so the Trainer counts labels[..., 1:]; one window of 4 micro-batches
    equals the whole window as one batch."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=11, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config)
    reference = transformers.LlamaForCausalLM(config)
    reference.load_state_dict(model.state_dict())
    tokens, targets, _ = make_padded_tokens(8, 6, seed=3)
    trainer, captured = trainer_run(model, token_samples(tokens, targets))
    assert trainer.model_accepts_loss_kwargs and trainer._loss_shifts_labels
    assert [seen for seen, _ in captured] == [4]
    reference(input_ids=tokens, labels=targets).loss.backward()  # the window as one batch
    assert relative_error(captured[0][1], current_gradients(reference)) < 1e-6


@TOKEN_RUNS
def test_trainer_without_loss_kwargs_takes_the_mean_of_the_micro_batches_means(n_sequences):
    tokens, targets, batches = token_data(n_sequences)
    trainer, captured = trainer_run(TokenLossNoKwargs(), token_samples(tokens, targets))
    assert not trainer.model_accepts_loss_kwargs and trainer.compute_loss_func is None
    model = TokenModel()
    assert_windows(captured, batches, lambda w: mean_of_means_gradients(model, w))
    errors = [relative_error(got, one_batch_token_gradients(model, w))
              for (_, got), w in zip(captured, windows(batches, K), strict=True)]  # fmt: skip
    assert min(errors) > 0.05, errors  # the windows' micro-batches hold unequal token counts
    if n_sequences == 8:  # notebook 07 prints its mirror's error on this window
        assert f"{errors[0]:.1%}" == "12.1%", errors


def test_trainer_without_loss_kwargs_divides_a_short_last_window_by_its_size():
    batches = regression_batches()
    samples = [{"inputs": x, "labels": y} for b in batches for x, y in zip(*b, strict=True)]
    _, captured = trainer_run(RegressionNoKwargs(), samples, micro_batch=16)
    model = regression_model()
    assert_windows(captured, batches, lambda w: trainer_fallback_gradients(model, F.mse_loss, w))
    tail = list(windows(batches, K))[-1]
    assert short_window_share(captured[-1][1], model, tail) == pytest.approx(1.0, abs=1e-5)


def test_trainer_counts_items_with_a_compute_loss_func_too():
    """A model without loss kwargs, but a compute_loss_func: the Trainer counts the window's
    tokens and passes them to it."""
    from transformers.loss.loss_utils import fixed_cross_entropy

    def loss_func(outputs, labels, num_items_in_batch=None):
        return fixed_cross_entropy(outputs["logits"], labels, num_items_in_batch)

    tokens, targets, batches = token_data()
    trainer, captured = trainer_run(
        TokenLossNoKwargs(), token_samples(tokens, targets), compute_loss_func=loss_func
    )
    assert not trainer.model_accepts_loss_kwargs
    model = TokenModel()
    for (_, got), window in zip(captured, windows(batches, K), strict=True):
        assert relative_error(got, one_batch_token_gradients(model, window)) < 1e-6


# --------------------------------------------- average_tokens_across_devices
def test_average_tokens_across_devices_defaults_to_true():
    transformers = pytest.importorskip("transformers")
    field = transformers.TrainingArguments.__dataclass_fields__["average_tokens_across_devices"]
    assert field.default is True
    with tempfile.TemporaryDirectory() as folder:
        assert transformers.TrainingArguments(output_dir=folder).average_tokens_across_devices


def ranks_main(argv: list[str]) -> None:
    """One rank of the 2-process run: the same Trainer on each rank's share of the sequences
    (the Trainer's dataloader shards them), with and without average_tokens_across_devices,
    and without loss kwargs; rank 0 writes each window's gradient error against one process
    running the whole global window (both ranks' micro-batches) as one batch."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    out = parser.parse_args(argv).out
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    unsynced, no_sync = [], DistributedDataParallel.no_sync

    def counting_no_sync(self):  # the micro-batches DDP does not all-reduce
        unsynced.append(1)
        return no_sync(self)

    DistributedDataParallel.no_sync = counting_no_sync
    k, micro_batch = 2, 2
    tokens, targets, _ = make_padded_tokens(20, 6, seed=3)  # per rank: 5 micro-batches
    samples = token_samples(tokens, targets)
    results = {}
    runs = {
        "average_tokens_across_devices": (TokenLoss, True),
        "each rank its own count": (TokenLoss, False),
        "no loss kwargs": (TokenLossNoKwargs, True),
    }
    for name, (model_class, average) in runs.items():
        unsynced.clear()
        trainer, captured = trainer_run(
            model_class(), samples, k=k, micro_batch=micro_batch,
            average_tokens_across_devices=average, ddp_backend="gloo",
        )  # fmt: skip
        world = trainer.args.world_size
        per_window = world * k * micro_batch  # sequences of both ranks in one window
        reference = TokenModel()
        errors, fallback_errors = [], []
        for step, (_, got) in enumerate(captured):
            rows = slice(step * per_window, (step + 1) * per_window)
            window = list(zip(tokens[rows].split(2), targets[rows].split(2), strict=True))
            errors.append(relative_error(got, one_batch_token_gradients(reference, window)))
            # without counts: each rank's mean of its means, averaged by DDP: the mean of all
            # the window's micro-batches' means (equal numbers of micro-batches per rank)
            fallback = trainer_fallback_gradients(
                reference, lambda o, t: F.cross_entropy(o, t, ignore_index=-100), window
            )
            fallback_errors.append(relative_error(got, fallback))
        results[name] = {"world": world, "steps": len(captured), "errors": errors,
                         "fallback_errors": fallback_errors, "no_sync": len(unsynced)}  # fmt: skip
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(results))


def test_average_tokens_across_devices_on_two_processes(tmp_path):
    pytest.importorskip("transformers")
    from helpers.processes.run_ranks import DDP_PRELOAD, launch

    out = tmp_path / "trainer-ddp.json"
    preload = (*DDP_PRELOAD, "transformers.trainer")  # what both ranks import, imported once
    launch("tests.at_scale.test_frameworks_real", [f"--out={out}"], timeout=120, preload=preload)
    results = json.loads(out.read_text())
    averaged = results["average_tokens_across_devices"]
    assert averaged["world"] == 2 and averaged["steps"] == 3  # windows of 2, 2 and 1 per rank
    assert {run["no_sync"] for run in results.values()} == {2}  # all but each window's last
    assert max(averaged["errors"]) < 1e-6, averaged
    assert min(results["each rank its own count"]["errors"]) > 0.01, results
    fallback = results["no loss kwargs"]
    assert max(fallback["fallback_errors"]) < 1e-6 and min(fallback["errors"]) > 0.01, fallback


# ------------------------------------------------------------------ the quotes
FRAMEWORKS = {"lightning", "pytorch_lightning", "accelerate", "transformers", "torch",
              "torchtune", "torchtitan", "deepspeed"}  # fmt: skip
SOURCE_FILE = re.compile(r"(?:src/)?([A-Za-z_]\w*)((?:/[\w.]+)+\.py)")
VERSION = re.compile(r"(?<![\w.])\d+\.\d+\.\d+(?![\w.]*\d)")


def notebook_paragraphs():
    import nbformat

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                for paragraph in re.split(r"\n\s*\n", cell.source):
                    yield path.name, paragraph


def framework_file(span: str) -> tuple[str, Path] | None:
    """``(package, installed file)`` for a code span naming a framework's source file, as
    ``pkg/.../file.py`` or ``src/pkg/...``; None for other spans (the course's own files)."""
    match = SOURCE_FILE.fullmatch(span)
    if not match:
        return None
    package, rest = match.groups()
    spec = importlib.util.find_spec(package) if package.isidentifier() else None
    if spec is None or spec.origin is None:
        assert package not in FRAMEWORKS, f"`{span}` is quoted but {package} is not installed"
        return None
    folder = Path(spec.origin).parent
    if folder.parent in (ROOT, ROOT / "loop_auditor" / "src"):  # helpers, loop_auditor: ours
        return None
    return package, folder / rest.lstrip("/")


def squash(text: str) -> str:
    return " ".join(text.split())


def quoted_paragraphs(paragraphs):
    """Each paragraph that names a framework's source file: (notebook, paragraph, {(package,
    file)}, its other code spans: the quotes)."""
    for notebook, paragraph in paragraphs:
        spans = re.findall(r"`([^`]+)`", paragraph)
        files = {span: framework_file(span) for span in spans}
        named = {found for found in files.values() if found}
        if named:
            yield notebook, paragraph, named, [span for span in spans if not files[span]]


def check_quotes(paragraphs):
    for notebook, paragraph, named, quotes in quoted_paragraphs(paragraphs):
        sources = []
        for _, path in named:
            assert path.is_file(), f"{notebook} names {path}, which does not exist"
            sources.append(squash(path.read_text(encoding="utf-8")))
        assert quotes, f"{notebook} names a file but quotes nothing from it: {paragraph!r}"
        for quote in quotes:
            assert any(squash(quote) in source for source in sources), (
                f"{notebook}: `{quote}` is not in {sorted(str(p) for _, p in named)}"
            )


def check_versions(paragraphs):
    for notebook, paragraph, named, _ in quoted_paragraphs(paragraphs):
        stated = set(VERSION.findall(re.sub(r"`[^`]+`", "", paragraph)))
        installed = {package: importlib.metadata.version(package).split("+")[0]
                     for package, _ in named}  # fmt: skip
        for package, version in installed.items():
            assert version in stated, f"{notebook}: quotes {package} but does not say {version}"
        assert stated <= set(installed.values()), f"{notebook}: {stated} in {paragraph!r}"


def test_every_quote_is_in_the_installed_file_it_is_attributed_to():
    paragraphs = list(notebook_paragraphs())
    assert len(list(quoted_paragraphs(paragraphs))) >= 4  # 07's Sources: 4 paragraphs
    check_quotes(paragraphs)


def test_each_quoting_paragraph_states_the_installed_version():
    check_versions(list(notebook_paragraphs()))


@pytest.mark.parametrize(
    ("paragraph", "check", "message"),
    [
        ("Lightning 2.6.6, `src/lightning/pytorch/loops/optimization/automatic.py`: "
         "`closure_loss = closure_loss * normalize`", check_quotes, "is not in"),
        ("Lightning 2.6.6, `lightning/pytorch/loops/optimization/no_such_file.py`: "
         "`closure_loss`", check_quotes, "does not exist"),
        ("Lightning 2.5.0, `lightning/pytorch/loops/optimization/automatic.py`: "
         "`closure_loss = closure_loss / normalize`", check_versions, "does not say 2.6.6"),
        ("Lightning, `lightning/pytorch/loops/optimization/automatic.py`: "
         "`closure_loss = closure_loss / normalize`", check_versions, "does not say 2.6.6"),
    ],
)  # fmt: skip
def test_a_wrong_quote_or_version_is_caught(paragraph, check, message):
    """The two checks above can fail: a quote not in its file, a missing file, a stale
    version or none."""
    pytest.importorskip("lightning")
    with pytest.raises(AssertionError, match=message):
        check([("06", paragraph)])


def test_no_notebook_imports_a_framework():
    import nbformat

    imports = re.compile(r"^\s*(?:import|from)\s+(lightning|pytorch_lightning|accelerate|"
                         r"transformers)\b", re.MULTILINE)  # fmt: skip
    assert imports.search("x = 1\n    from accelerate import Accelerator")  # it can fail
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                assert not imports.search(cell.source), f"{path.name} imports a framework"


if __name__ == "__main__":  # a rank of test_average_tokens_across_devices_on_two_processes
    ranks_main(sys.argv[1:])


def accelerate_steps(epochs: int, prepare_loader: bool, tmp_path, monkeypatch) -> list[int]:
    """The micro-batches (counted over all epochs) after which Accelerate's wrapped optimizer
    really steps: the loop of its docs, 10 micro-batches an epoch, k = 4."""
    import accelerate
    from accelerate.state import AcceleratorState, GradientState

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    try:
        accelerator = accelerate.Accelerator(gradient_accumulation_steps=K, cpu=True)
        model = make_mlp((8, 16, 3))
        torch_optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        seen, steps = [0], []
        torch_optimizer.register_step_pre_hook(lambda *_: steps.append(seen[0]))
        generator = torch.Generator().manual_seed(0)  # 10 micro-batches of 8 an epoch
        inputs = torch.randn(80, 8, generator=generator)
        labels = torch.randint(0, 3, (80,), generator=generator)
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(inputs, labels), batch_size=8, shuffle=False
        )
        if prepare_loader:
            model, optimizer, loader = accelerator.prepare(model, torch_optimizer, loader)
        else:
            model, optimizer = accelerator.prepare(model, torch_optimizer)
        for _ in range(epochs):
            for x, y in loader:
                seen[0] += 1
                with accelerator.accumulate(model):
                    accelerator.backward(F.cross_entropy(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
        return steps
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


@pytest.mark.frameworks
def test_accelerate_carries_an_unprepared_loaders_tail_into_the_next_epoch(tmp_path, monkeypatch):
    """Notebook 07's table: with a dataloader through prepare, each epoch's short last window
    is stepped; with any other, its micro-batches join the next epoch's first window, and only
    the run's final tail is never stepped."""
    assert accelerate_steps(2, True, tmp_path, monkeypatch) == [4, 8, 10, 14, 18, 20]
    assert accelerate_steps(2, False, tmp_path, monkeypatch) == [4, 8, 12, 16, 20]
    assert accelerate_steps(3, False, tmp_path, monkeypatch) == [4, 8, 12, 16, 20, 24, 28]


@pytest.mark.parametrize(
    ("model", "layer_norm"),
    [("llama", False), ("mistral", False), ("qwen2", False), ("gpt2", True), ("bert", True)],
)
def test_transformers_models_normalize_each_sample_with_layernorm_or_rmsnorm(model, layer_norm):
    """Notebook 03 and the glossary: most transformers use LayerNorm or RMSNorm. Today's
    decoder models define an RMSNorm of their own and no nn.LayerNorm; GPT-2 and BERT use
    nn.LayerNorm. Both normalize each sample over its own features."""
    import importlib
    import inspect

    pytest.importorskip("transformers")
    source = inspect.getsource(
        importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    )
    assert ("nn.LayerNorm(" in source) is layer_norm
    assert layer_norm or re.search(r"class \w+RMSNorm\(nn\.Module\)", source)
