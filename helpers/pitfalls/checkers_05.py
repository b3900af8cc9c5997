"""Checkers for notebook 05, pitfalls: predict what clipping every micro-batch leaves in
``.grad`` (exercise 05.1)."""

from __future__ import annotations

import math

from helpers.checks import number_checker
from helpers.translation import N_

CLIP_MAX_NORM, CLIP_K = 0.5, 4

check_clipped_norm = number_checker(
    CLIP_MAX_NORM,
    {
        CLIP_K * CLIP_MAX_NORM: N_(
            "That is 4 x 0.5, as if four clipped micro-batch gradients "
            "added up. clip_grad_norm_ rescales the whole of .grad, the running sum, in place: "
            "the clip after the 4th backward() caps the sum itself."
        ),
        math.sqrt(CLIP_K) * CLIP_MAX_NORM: N_(
            "That is the norm of four clipped pieces at right "
            "angles (2 x 0.5). But the last clip_grad_norm_ runs on the whole sum in .grad, "
            "after the 4th backward()."
        ),
        CLIP_MAX_NORM / CLIP_K: N_(
            "That is 0.5 / 4, as if the clipped gradient were divided "
            "by k afterwards. The losses were divided by 4 before backward(); the clip after "
            "the 4th backward() then caps the summed .grad at max_norm."
        ),
    },
    N_(
        "clip_grad_norm_ scales the whole of .grad in place whenever its norm is above "
        "max_norm. What does .grad hold after the 4th backward(), and what does the clip right "
        "after it do?"
    ),
    doc="Exercise 05.1: the norm of the gradient that step() uses when clip_grad_norm_("
    "max_norm=0.5) runs after every one of 4 micro-batch backward() calls.",
)
