"""The trimmed core of Optimizer.zero_grad that notebook 02 prints: the installed loop, the
foreach branch cut, for today's source and for torch 2.3's way of writing it."""

from __future__ import annotations

import inspect

import pytest
import torch

from helpers.zero_grad_internals.zero_grad_source import HEADER, zero_grad_core

# torch 2.3.0's loop, as its optimizer.py writes it (single quotes, a parenthesized test).
TORCH_2_3 = """\
        with torch.autograd.profiler.record_function(self._zero_grad_profile_name):
            for group in self.param_groups:
                for p in group['params']:
                    if p.grad is not None:
                        if set_to_none:
                            p.grad = None
                        else:
                            if p.grad.grad_fn is not None:
                                p.grad.detach_()
                            else:
                                p.grad.requires_grad_(False)
                            if (not foreach or p.grad.is_sparse):
                                p.grad.zero_()
                            else:
                                assert per_device_and_dtype_grads is not None
                                per_device_and_dtype_grads[p.grad.device][p.grad.dtype].append(p.grad)
            if foreach:
                assert per_device_and_dtype_grads is not None
"""


@pytest.mark.parametrize(
    "source",
    [inspect.getsource(torch.optim.Optimizer.zero_grad), TORCH_2_3],
    ids=["installed", "torch-2.3"],
)
def test_the_core_is_the_loop_without_the_foreach_path(source):
    core = zero_grad_core(source)
    lines = core.removeprefix(HEADER).splitlines()
    assert lines[0] == "for group in self.param_groups:"
    assert lines[-1] == "                p.grad.zero_()", "zero_() takes the place of its if"
    assert "foreach" not in core.removeprefix(HEADER) and "profiler" not in core
    assert "                if p.grad.grad_fn is not None:" in lines
    compile(core, "<core>", "exec")  # it is valid Python as printed


def test_a_source_without_the_loop_is_given_whole_and_bad_input_is_refused():
    assert zero_grad_core("    def f():\n        pass\n") == "def f():\n    pass\n"
    with pytest.raises(TypeError, match=r"inspect\.getsource"):
        zero_grad_core(torch.optim.Optimizer.zero_grad)
