"""Distribution checks shared by the sampler tests: Pearson's chi-square of drawn tokens against an exact
filtered distribution (``reference_sampling.exact_distribution``), and that check over copies of one row."""

from __future__ import annotations

from collections.abc import Callable

import torch
from scipy.stats import chisquare

from rocm_inductor.providers.reference_sampling import exact_distribution


def chi2_pvalue(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of the draws ``tokens`` (int, any shape) against ``probs`` ((V,) float, sums to 1).

    Raises AssertionError when a token falls outside ``probs``' support (the filter kept a dropped token).
    A single-token support returns 1.0 (nothing to test beyond the support). Bins whose expected count is
    below 5 are pooled into one (the usual validity rule for the chi-square approximation).
    """
    counts = torch.bincount(tokens.reshape(-1).cpu(), minlength=probs.numel()).double()
    support = probs > 0
    outside = counts[~support]
    assert outside.sum() == 0, f"drew tokens outside the kept set: {(~support).nonzero().flatten()[outside > 0]}"
    if int(support.sum()) == 1:
        return 1.0
    e, o = probs[support].double() * counts.sum(), counts[support]
    small = e < 5
    if small.any():
        e, o = torch.cat([e[~small], e[small].sum()[None]]), torch.cat([o[~small], o[small].sum()[None]])
    return float(chisquare(o.numpy(), e.numpy()).pvalue)


def assert_rows_follow_filters(draw: Callable[..., torch.Tensor], logits: torch.Tensor, n_rows: int,
                               cases, device="cpu") -> None:
    """``n_rows`` copies of one row of ``logits`` ((V,) float), drawn by ``draw(x, temperature=t, top_p=p,
    min_p=mp)`` for each ``(t, p, mp)`` of ``cases`` (no top-k): every chi-square p-value against
    :func:`exact_distribution` must exceed 1e-4 (AssertionError names the case)."""
    x = logits.expand(n_rows, logits.numel()).contiguous().to(device)
    for t, p, mp in cases:
        tok = draw(x, temperature=t, top_p=p, min_p=mp)
        assert chi2_pvalue(tok, exact_distribution(logits, t, 0, p, mp)) > 1e-4, (t, p, mp)
