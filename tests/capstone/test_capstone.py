"""Notebook 09's capstone (exercise 09.1): the setting, the single-process reference, and
the checker, which runs the learner's function on 2 real DDP processes (gloo). A launch of 2
processes costs about 3 s: the answers (each mistake, the correct loops) are judged together
in one launch (``judge_capstones``), each test asserting on its own verdict; the learner's
path (``check_capstone``, one launch per answer) is run for a correct answer, an exception in
one rank and a hang. Also exercise 09.2's checker, and the exercise text's list of the names
the learner's function may use."""

import functools
import importlib.util
import itertools
import re
import textwrap
import time
from pathlib import Path

import pytest
import torch
from chinese_messages import chinese_differences

from helpers import learner_code
from helpers.capstone import capstone_run, checkers_09
from helpers.capstone.checkers_09 import check_capstone, check_gradient_allreduces, judge_capstones
from helpers.processes import run_ranks
from helpers.processes.launcher import STACKS_ON_STOP
from helpers.spies import ClipSpy

HEADER = """\
import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

MAX_NORM = 0.3  # a name from another cell: the ranks' module does not have it


"""

# The notebook's solution (its solution cell holds the same function; a test checks).
MODEL_SOLUTION = """\
def train_ddp(model, optimizer, scheduler, scaler, micro_batches, accumulation_steps):
    world = dist.get_world_size()
    for start in range(0, len(micro_batches), accumulation_steps):
        window = micro_batches[start : start + accumulation_steps]
        tokens = sum((targets != -100).sum() for _, targets in window)
        dist.all_reduce(tokens)  # the window's token count over both ranks
        optimizer.zero_grad()
        for j, (inputs, targets) in enumerate(window):
            last = j == len(window) - 1
            with contextlib.nullcontext() if last else model.no_sync():
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    logits = model(inputs)
                    loss = F.cross_entropy(logits, targets, ignore_index=-100, reduction="sum")
                scaler.scale(loss * world / tokens).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 0.3)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
"""

# Correct loops written otherwise: a counter over the micro-batches, the mean loss times the
# micro-batch's tokens inside autocast, the count divided by the world size, zero_grad after
# the step (set_to_none=False); and one with an ExitStack, the last micro-batch apart.
COUNTER_STYLE = """\
def train_ddp(model, optimizer, scheduler, scaler, micro_batches, accumulation_steps):
    n = len(micro_batches)
    for i, (inputs, targets) in enumerate(micro_batches):
        last = (i + 1) % accumulation_steps == 0 or i == n - 1
        if i % accumulation_steps == 0:
            window = micro_batches[i : i + accumulation_steps]
            tokens = torch.stack([(t != -100).sum() for _, t in window]).sum().float()
            dist.all_reduce(tokens, op=dist.ReduceOp.SUM)
            tokens = tokens / dist.get_world_size()
        context = contextlib.nullcontext() if last else model.no_sync()
        with context, torch.autocast("cpu", dtype=torch.bfloat16):
            mean = F.cross_entropy(model(inputs), targets)  # ignore_index=-100 by default
            loss = mean * (targets != -100).sum() / tokens
        scaler.scale(loss).backward()
        if last:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.3)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=False)
"""

EXIT_STACK_STYLE = """\
def train_ddp(model, optimizer, scheduler, scaler, micro_batches, accumulation_steps):
    k = accumulation_steps
    for window in [micro_batches[s : s + k] for s in range(0, len(micro_batches), k)]:
        count = torch.zeros(())
        for _, targets in window:
            count += targets.ne(-100).sum()
        dist.all_reduce(count)

        def backward(inputs, targets):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(inputs)
            loss = F.cross_entropy(out.float(), targets, reduction="sum") / count
            scaler.scale(loss * dist.get_world_size()).backward()

        with contextlib.ExitStack() as stack:
            stack.enter_context(model.no_sync())
            for inputs, targets in window[:-1]:
                backward(inputs, targets)
        backward(*window[-1])
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 0.3)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad()
"""

ALL_REDUCE = "        dist.all_reduce(tokens)  # the window's token count over both ranks\n"
CLIP = "        nn.utils.clip_grad_norm_(model.parameters(), 0.3)\n"
BACKWARD = "                scaler.scale(loss * world / tokens).backward()\n"
SUM = 'loss = F.cross_entropy(logits, targets, ignore_index=-100, reduction="sum")'

# Each mistake: the edits to the model solution, and a fragment of the hint it must get.
MISTAKES = {
    "no token-count all-reduce": ([(ALL_REDUCE, "")], "its own window's token count"),
    "dividing by the local tokens": (
        [(ALL_REDUCE, ""), ("loss * world / tokens", "loss / tokens")],
        "its own window's token count",
    ),
    "dividing by the micro-batch count": (
        [
            (SUM, SUM.replace(', reduction="sum")', ") / len(window)")),
            ("loss * world / tokens", "loss"),
        ],
        "divided by the number of micro-batches",
    ),
    "no world-size factor": ([("loss * world / tokens", "loss / tokens")], "get_world_size()"),
    "the loss outside autocast": (  # computed from the bfloat16 logits: rounded
        [("                    " + SUM, "                " + SUM)],
        "from the bfloat16 logits outside autocast",
    ),
    "no no_sync": (
        [("contextlib.nullcontext() if last else model.no_sync()", "contextlib.nullcontext()")],
        "inside `with model.no_sync():`",
    ),
    "clipping before unscale_": (
        [
            (
                f"        scaler.unscale_(optimizer)\n{CLIP}",
                f"{CLIP}        scaler.unscale_(optimizer)\n",
            )
        ],
        "before clip_grad_norm_",
    ),
    "clipping per micro-batch": (
        [(CLIP, ""), (BACKWARD, BACKWARD + "            " + CLIP.strip() + "\n")],
        "clipped after each micro-batch",
    ),
    "scheduler per micro-batch": (
        [
            ("        scheduler.step()\n", ""),
            (BACKWARD, BACKWARD + "            scheduler.step()\n"),
        ],
        "scheduler.step() ran in the micro-batch loop",
    ),
    "optimizer.step instead of scaler.step": (
        [("scaler.step(optimizer)", "optimizer.step()")],
        "optimizer.step() was called instead of scaler.step",
    ),
    "forgetting the short last window": (
        [
            (
                "range(0, len(micro_batches), ",
                "range(0, len(micro_batches) - accumulation_steps + 1, ",
            )
        ],
        "short last window was never stepped",
    ),
    "forgetting zero_grad": ([("        optimizer.zero_grad()\n", "")], "zero_grad() is missing"),
    "no update": ([("        scaler.update()\n", "")], "scaler.update() is missing"),
    "update before step": (
        [
            (
                "        scaler.step(optimizer)\n        scaler.update()\n",
                "        scaler.update()\n        scaler.step(optimizer)\n",
            )
        ],
        "ran before scaler.step(optimizer)",
    ),
    "no scheduler": ([("        scheduler.step()\n", "")], "scheduler.step() never ran"),
    "no clipping": ([(CLIP, "")], "clipped at the wrong norm, or not at all"),
    "clipping at 1.0": (  # the same weights as no clipping: the spy names the norm used
        [(CLIP, CLIP.replace("0.3", "1.0"))],
        "clipped at max_norm=1.0: clip the unscaled gradient to max_norm=0.3",
    ),
    "unscale_ per micro-batch": (  # the hint is not "update() is missing"
        [
            ("        scaler.unscale_(optimizer)\n", ""),
            (BACKWARD, BACKWARD + "            scaler.unscale_(optimizer)\n"),
        ],
        "unscale_(optimizer) ran twice in one window",
    ),
    "no scaler.step": (  # the hint is not "clipped after each micro-batch"
        [("        scaler.step(optimizer)\n", "")],
        "scaler.step(optimizer) never ran",
    ),
    "no_sync() on every micro-batch, the last one too": (
        [("contextlib.nullcontext() if last else model.no_sync()", "model.no_sync()")],
        "does any backward all-reduce?",
    ),
    "model.module instead of the DDP model": (
        [("logits = model(inputs)", "logits = model.module(inputs)")],
        "not model.module",
    ),
    "a name from another cell": (
        [
            (
                "nn.utils.clip_grad_norm_(model.parameters(), 0.3)",
                "nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)",
            )
        ],
        "only torch, nn, F, dist",
    ),
    "a default from another cell": (
        [("accumulation_steps):\n", "accumulation_steps, limit=MAX_NORM):\n")],
        "only torch, nn, F, dist",
    ),
    "an exception in one rank": (  # rank 0 waits in a collective: it is stopped
        [
            (
                "        optimizer.zero_grad()\n",
                "        optimizer.zero_grad()\n        if dist.get_rank() == 1 and start:\n"
                "            {}[window]\n",
            )
        ],
        "TypeError: unhashable type",
    ),
}


def learner_function(folder, source: str, name: str = "train_ddp"):
    """``source`` as the function of a module of its own (as a notebook cell would be)."""
    path = folder / f"learner_{abs(hash(source))}.py"
    path.write_text(HEADER + source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def with_mistake(edits) -> str:
    source = MODEL_SOLUTION
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    return source


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("learner")


# ------------------------------------------------------------------ the setting
def test_the_ranks_token_counts_differ_in_every_window():
    data = [capstone_run.capstone_data(rank) for rank in range(capstone_run.WORLD)]
    slices = capstone_run.window_slices(capstone_run.MICRO_BATCHES)
    assert [len(s) for s in slices] == [3, 3, 3, 1]
    for window in slices:
        counts = [sum(capstone_run.token_count(data[r][i][1]) for i in window) for r in range(2)]
        assert counts[0] != counts[1], counts
    sizes = {tuple(tokens.shape) for rank in data for tokens, _ in rank}
    assert len(sizes) > 5  # uneven micro-batches


def test_the_reference_skips_the_overflowing_window_and_halves_the_scale():
    reference = capstone_run.reference_run()
    assert reference["scales"] == [4096, 2048, 2048, 2048]  # make_tools: init_scale=4096
    assert reference["lrs"] == [0.5, 0.125, 0.0625]  # window 2's step (0.25) was skipped
    assert torch.isfinite(reference["weights"]).all()


def test_every_variant_is_far_from_the_reference_and_from_each_other():
    """The checker names a mistake by the variant it matches within 1% of the distance the
    weights moved: the variants must be much further apart than that."""
    start = capstone_run.flat_weights(capstone_run.make_model())
    weights = {v: capstone_run.reference_run(v)["weights"] for v in capstone_run.VARIANTS}
    moved = (weights["correct"] - start).norm()
    rounded = weights.pop("loss in bfloat16")  # the one mistake whose weights are close
    for a, b in itertools.combinations(weights, 2):
        assert (weights[a] - weights[b]).norm() > 0.05 * moved, (a, b)
    near = (rounded - weights["correct"]).norm()
    assert 0.002 * moved < near < 0.05 * moved, near / moved  # near, yet told apart
    assert not torch.allclose(
        rounded, weights["correct"], rtol=checkers_09.CAPSTONE_RTOL, atol=checkers_09.CAPSTONE_ATOL
    ), "a loss rounded in bfloat16 fails the check"
    assert all((rounded - w).norm() > 0.05 * moved for v, w in weights.items() if v != "correct")
    with pytest.raises(ValueError, match="variant must be one of"):
        capstone_run.reference_run("typo")


def test_the_reference_is_one_process_on_the_whole_batch():
    """Without AMP, clipping and the overflow, a window's step of the reference is one
    forward on all the window's sequences of both ranks (padded to one length)."""
    data = [capstone_run.capstone_data(rank) for rank in range(capstone_run.WORLD)]
    window = capstone_run.window_slices(capstone_run.MICRO_BATCHES)[0]
    parts = [data[r][i] for r in range(2) for i in window]
    length = max(tokens.shape[1] for tokens, _ in parts)

    def padded(tensor, value):
        return torch.nn.functional.pad(tensor, (0, length - tensor.shape[1]), value=value)

    tokens = torch.cat([padded(t, 0) for t, _ in parts])
    targets = torch.cat([padded(t, capstone_run.PAD) for _, t in parts])
    whole, accumulated = capstone_run.make_model(), capstone_run.make_model()
    torch.nn.functional.cross_entropy(whole(tokens), targets).backward()
    total = sum(capstone_run.token_count(t) for _, t in parts)
    for t, y in parts:
        loss = torch.nn.functional.cross_entropy(accumulated(t), y, reduction="sum")
        (loss / total).backward()
    for a, b in zip(whole.parameters(), accumulated.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)


def identity(function):
    return function


@identity
def decorated(model):
    return model


def test_function_source_and_placeholders():
    source = learner_code.function_source(decorated)
    assert source.startswith("def decorated(model):")
    assert learner_code.has_placeholder("def f():\n    ...\n")
    assert not learner_code.has_placeholder("def f():\n    return 1\n")
    with pytest.raises(ValueError, match="not as a lambda") as error:
        learner_code.function_source(lambda x: x)
    assert "<lambda>" not in str(error.value)


def test_the_clip_spy_records_each_max_norm_and_restores_the_function():
    original = torch.nn.utils.clip_grad_norm_
    weight = torch.nn.Parameter(torch.ones(3))
    weight.grad = torch.full((3,), 10.0)
    with ClipSpy() as clips:
        torch.nn.utils.clip_grad_norm_([weight], 1.0)
        torch.nn.utils.clip_grad.clip_grad_norm_([weight], max_norm=0.3)
    assert clips.norms == [1.0, 0.3] and torch.nn.utils.clip_grad_norm_ is original
    assert clips.calls == [{"max_norm": 1.0, "norm_type": 2.0}, {"max_norm": 0.3, "norm_type": 2.0}]
    assert abs(weight.grad.norm().item() - 0.3) < 1e-6


# ------------------------------------------------------------------ the checker
HANG = with_mistake(
    [("        optimizer.zero_grad()\n",
      "        optimizer.zero_grad()\n        if dist.get_rank() == 1:\n"
      "            import time\n            time.sleep(600)\n")]
)  # fmt: skip

# Both ranks wait in C code that keeps the GIL (as a deadlock inside C++ code does): only a
# watchdog that needs no GIL can end them before the launch's own timeout.
HANG_HOLDING_THE_GIL = with_mistake(
    [("        optimizer.zero_grad()\n",
      "        optimizer.zero_grad()\n        import ctypes\n\n"
      "        ctypes.PyDLL(None).sleep(600)\n")]
)  # fmt: skip


def unfinished(model, optimizer, scheduler, scaler, micro_batches, accumulation_steps):
    optimizer.zero_grad()
    ...


# The reference runs (about 0.5 s each), made once: a batch's verdicts and their Chinese
# rerun compare each answer with the same ones.
REFERENCE_RUNS = functools.cache(capstone_run.reference_run)


class Launches:
    """Inside a ``with`` block: the launches of 2 processes (``helpers.processes.run_ranks.launch``)
    and the outcomes of each ``run_capstones``, with strict checks off (a batch judges wrong
    answers too)."""

    def __enter__(self):
        self.launches, self.runs = [], []
        self.patch = pytest.MonkeyPatch()
        launch, run_capstones = run_ranks.launch, capstone_run.run_capstones

        def counted_launch(module, args, *rest, **options):
            self.launches.append((module, list(args)))
            return launch(module, args, *rest, **options)

        def recorded_run(functions, *rest, **options):
            self.runs.append(run_capstones(functions, *rest, **options))
            return self.runs[-1]

        self.patch.setattr(run_ranks, "launch", counted_launch)
        self.patch.setattr(capstone_run, "run_capstones", recorded_run)
        self.patch.setattr(capstone_run, "reference_run", REFERENCE_RUNS)
        self.patch.delenv("GM_STRICT_CHECKS", raising=False)
        return self

    def __exit__(self, *exc):
        self.patch.undo()


# Every answer the checker must judge, in one batch: the model solution first, each mistake
# (some raise on both ranks, one on one rank while the other waits in an all-reduce), then
# the correct loops written otherwise, judged after all of them on fresh state; and two
# answers that must not be run at all.
BATCH = ["model solution", *MISTAKES, "counter", "stack", "unanswered", "unfinished"]


@pytest.fixture(scope="module")
def judged(folder):
    """Every answer of :data:`BATCH` judged by one ``judge_capstones``: its verdicts by name,
    with the launches and outcomes it took."""
    sources = {"model solution": MODEL_SOLUTION, "counter": COUNTER_STYLE}
    sources |= {"stack": EXIT_STACK_STYLE}
    sources |= {mistake: with_mistake(edits) for mistake, (edits, _) in MISTAKES.items()}
    answers = {name: learner_function(folder, source) for name, source in sources.items()}
    answers |= {"unanswered": ..., "unfinished": unfinished}
    with Launches() as seen:
        verdicts = judge_capstones([answers[name] for name in BATCH])
    seen.verdicts = dict(zip(BATCH, verdicts, strict=True))
    [seen.outcomes] = seen.runs
    return seen


def test_the_batch_judges_every_answer_in_one_launch(judged):
    """Each mistake is its own test below, but the checker ran them in one launch of 2
    processes, the one that desynchronizes the ranks included; the answers that cannot run
    were judged without running."""
    assert len(judged.launches) == 1, judged.launches
    [(module, args)] = judged.launches
    assert module == "helpers.capstone.capstone_run" and "--batch=60" in args
    assert sum(arg.startswith("--source=") for arg in args) == len(BATCH) - 2
    assert len(judged.outcomes) == len(BATCH) - 2
    assert judged.verdicts["unanswered"].unanswered
    assert "still has `...`" in judged.verdicts["unfinished"].message


def test_the_model_solution_passes(judged):
    """In the batch. Through the learner's path (check_capstone, a launch of its own) it is
    checked by nbval's run of notebook 09, which runs the folded solution with strict checks
    (tools/nbval_solutions.py); the learner's path and the batch give the same verdict (the
    test of an exception in one rank, below)."""
    result = judged.verdicts["model solution"]
    assert result.passed and "same weights as one process" in result.message, result.message


@pytest.mark.parametrize("name", ["counter", "stack"])
def test_correct_loops_written_otherwise_pass(judged, name):
    result = judged.verdicts[name]
    assert result.passed, result.message


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_mistake_is_named(judged, mistake):
    _, hint = MISTAKES[mistake]
    result = judged.verdicts[mistake]
    assert not result.passed and hint in result.message, result.message
    assert "Traceback" not in result.message


def test_every_verdict_of_the_batch_reads_in_chinese(judged, monkeypatch):
    """check_capstone's calls take too long for the suite's Chinese rerun of every checker
    call (tests/conftest.py): each run's results of the batch are judged again with
    GM_LANG=zh_CN, without launching anything. The verdict is the same, its message Chinese,
    and it names the same code, identifiers and numbers (a mistake's hint, a rank's error)."""
    monkeypatch.delenv("GM_STRICT_CHECKS", raising=False)
    monkeypatch.setenv("GM_LANG", "zh_CN")
    monkeypatch.setattr(capstone_run, "reference_run", REFERENCE_RUNS)
    run = [name for name in BATCH if name not in ("unanswered", "unfinished")]
    problems = []
    for name, outcome in zip(run, judged.outcomes, strict=True):
        if isinstance(outcome, capstone_run.CapstoneRunError):
            chinese = checkers_09.wrong(checkers_09._capstone_error_hint(outcome, timeout=60))
        else:
            chinese = checkers_09._judge_capstone(outcome)
        english = judged.verdicts[name]
        for problem in chinese_differences(english, chinese):
            problems.append(f"{name}: {problem}\n  zh: {chinese.message}")
    assert not problems, "\n".join(problems)


def test_an_exception_in_one_rank_alone_gets_the_batchs_verdict(folder, judged):
    """Through the learner's path: rank 1 raises, rank 0 waits in an all-reduce and is
    stopped; the verdict names rank 1's error, as the batch's does."""
    edits, hint = MISTAKES["an exception in one rank"]
    result = check_capstone(learner_function(folder, with_mistake(edits)))
    assert not result.passed and hint in result.message, result.message
    assert judged.verdicts["an exception in one rank"] == result


def test_a_hang_is_stopped_with_a_clear_message(folder):
    result = check_capstone(learner_function(folder, HANG), timeout=4)
    assert not result.passed and "did not finish within 4 s" in result.message, result.message


def test_a_hang_in_a_batch_ends_its_launch_and_no_other_verdict(folder, monkeypatch, capfd):
    """The ranks' deadline stops a hanging answer, even one that keeps the GIL: the answers
    before it keep their verdicts from that launch, the ones after it get a launch of their
    own. (In a batch, an answer's time starts when its run does, after the processes have
    started.) With ``GM_RANK_STACKS`` set, the stopped ranks' Python stacks are printed."""
    monkeypatch.setenv(STACKS_ON_STOP, "1")
    sources = (MODEL_SOLUTION, HANG_HOLDING_THE_GIL, COUNTER_STYLE)
    answers = [learner_function(folder, s) for s in sources]
    with Launches() as seen:
        started = time.monotonic()
        before, hang, after = judge_capstones(answers, timeout=5)
        took = time.monotonic() - started
    assert len(seen.launches) == 2, seen.launches
    assert sum(a.startswith("--source=") for a in seen.launches[1][1]) == 1  # only the last
    assert before.passed and after.passed, (before, after)
    assert not hang.passed and "did not finish within 5 s" in hang.message, hang.message
    assert took < capstone_run.START_ALLOWANCE, took  # the deadline, not the launch's timeout
    assert "in train_ddp" in capfd.readouterr().err  # the hanging frame, in the stacks


def test_answers_of_the_wrong_kind_launch_nothing():
    def unanswered(model, optimizer, scheduler, scaler, micro_batches, accumulation_steps):
        """Only a placeholder."""
        ...

    answers = [
        (..., "Not answered"),
        ("train_ddp", "pass your function itself"),
        (lambda model: None, "give it 6 parameters"),
        (unanswered, "Not answered"),
        (unfinished, "still has `...`"),
        (
            lambda model, optimizer, scheduler, scaler, micro_batches, k: None,
            "write your function with def in a cell, not as a lambda",
        ),
    ]
    with Launches() as seen:
        for answer, fragment in answers:
            result = check_capstone(answer)
            assert not result.passed and fragment in result.message, result.message
        batch = judge_capstones([answer for answer, _ in answers])
        assert batch == [check_capstone(answer) for answer, _ in answers]
    assert seen.launches == []


def test_the_exercise_source_needs_only_the_preamble():
    """The names the exercise promises are what the ranks' module starts with."""
    names = {"contextlib", "math", "torch", "dist", "nn", "F"}
    assert all(name in capstone_run.PREAMBLE_NAMES for name in names)
    scope: dict = {}
    exec(compile(capstone_run.PREAMBLE, "preamble", "exec"), scope)
    assert names <= set(scope)
    assert textwrap.dedent(MODEL_SOLUTION).startswith("def train_ddp(")


NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "09_capstone.ipynb"


def notebook_cells():
    import nbformat

    return nbformat.read(NOTEBOOK, as_version=4).cells


def test_the_exercise_text_lists_exactly_the_names_the_ranks_module_has():
    """Exercise 09.1's text names the names the learner's function may use: the same as the
    preamble the ranks' module starts with, and the same as the checker's hint."""
    bound = set(capstone_run.preamble_bindings())
    assert bound == {"contextlib", "math", "torch", "dist", "nn", "F"}
    [text] = [c.source for c in notebook_cells() if c.source.startswith("### Stage 4")]
    sentence = re.search(r"only these names exist\s+there: (.*?)\. Import", text, re.DOTALL)
    assert sentence, "the exercise's text lists the names its function may use"
    listed = set(re.findall(r"`([^`]+)`", sentence.group(1)))
    assert listed - {"torch.distributed"} == bound, listed
    hint_names = set(re.findall(r"\w+", capstone_run.PREAMBLE_NAMES)) - {"and", "distributed"}
    assert hint_names == bound, hint_names


def test_the_notebooks_solution_is_the_model_solution():
    [solution] = [
        c.source
        for c in notebook_cells()
        if "check_capstone(train_ddp, stage=4)" in c.source
        and "solution" in c.metadata.get("tags", [])
    ]
    assert MODEL_SOLUTION in solution


def test_the_allreduce_count_names_each_misconception(strict_checks):
    assert check_gradient_allreduces(4).passed
    questions = check_gradient_allreduces.questions
    for value in check_gradient_allreduces.misconceptions:
        with pytest.raises(AssertionError, match=re.escape(questions[value][:40])):
            check_gradient_allreduces(value)
    with pytest.raises(AssertionError, match=re.escape(questions[None][:40])):
        check_gradient_allreduces(5)


def test_the_allreduce_count_never_raises_at_a_learner():
    for answer, fragment in [(..., "Not answered"), ("4", "number"), (None, "number")]:
        result = check_gradient_allreduces(answer)
        assert not result.passed and fragment in result.message, result.message


def test_the_allreduce_counts_answer_is_what_a_run_counts(judged):
    """Exercise 09.2's answer, from the model solution run on 2 real processes: one bucket,
    all-reduced once per window, the overflowing window included."""
    from helpers.capstone.checkers_09 import BUCKETS

    results = judged.outcomes[BATCH.index("model solution")]
    assert results["buckets"] == BUCKETS
    assert results["allreduces"] == check_gradient_allreduces.expected() == 4


def test_a_run_stopped_after_its_results_were_written_keeps_them(folder, monkeypatch):
    """The function ran to its end on both ranks and rank 0 wrote the results; only leaving
    (destroying the process group) was stopped by the timeout: the run is judged on them."""

    def stopped_while_leaving(module, args, nproc, timeout):
        out = Path(next(a for a in args if a.startswith("--out="))[len("--out=") :])
        (out / "results.json").write_text('{"weights": [1.0]}', encoding="utf-8")
        raise RuntimeError(f"the {nproc}-process run took over {timeout:g} s and was stopped")

    monkeypatch.setattr(run_ranks, "launch", stopped_while_leaving)
    function = learner_function(folder, MODEL_SOLUTION)
    assert capstone_run.run_capstone(function, timeout=5) == {"weights": [1.0]}


def test_a_run_stopped_before_any_results_is_a_timeout(folder, monkeypatch):
    def stopped(module, args, nproc, timeout):
        raise RuntimeError(f"the {nproc}-process run took over {timeout:g} s and was stopped")

    monkeypatch.setattr(run_ranks, "launch", stopped)
    with pytest.raises(capstone_run.CapstoneRunError) as stop:
        capstone_run.run_capstone(learner_function(folder, MODEL_SOLUTION), timeout=5)
    assert stop.value.kind == "timeout"
