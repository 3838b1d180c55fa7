"""Pure-torch reference of ``rocm_fused::sample``: HF's logits-processor chain, literally.

The filters are HuggingFace transformers' warpers (``generation/logits_process.py``, 5.x):
``TemperatureLogitsWarper`` (``scores / T``), ``TopKLogitsWarper`` (``scores < topk(scores, k)[0][..., -1:]``
-> -inf), ``TopPLogitsWarper`` (ascending sort, ``softmax(...).cumsum() <= 1 - p`` -> -inf, the last
``min_tokens_to_keep = 1`` sorted token kept), ``MinPLogitsWarper`` (``probs < min_p * max(probs)`` -> -inf,
the top token kept), then ``multinomial(softmax(scores), 1)``. This module is the definition the other
providers are compared with; it loops over rows (per-row parameters) and is meant for tests and CPU.

Bad input gets a defined result (HF would raise or return garbage): NaN -> -inf; rows holding +inf, rows
with no finite score and temperature <= 0 are greedy (first argmax; 0 for an all -inf row).
"""

from __future__ import annotations

import torch

from ._sampling_args import ban_rows, per_row


def _top_k(s: torch.Tensor, k: int) -> torch.Tensor:
    """HF ``TopKLogitsWarper`` on one row (1, V); ``k <= 0`` or ``k >= V``: off."""
    if k <= 0 or k >= s.shape[-1]:
        return s
    return s.masked_fill(s < torch.topk(s, k)[0][..., -1, None], -float("inf"))


def _top_p(s: torch.Tensor, p: float) -> torch.Tensor:
    """HF ``TopPLogitsWarper`` (min_tokens_to_keep=1) on one row (1, V); ``p >= 1``: off."""
    if p >= 1.0:
        return s
    sorted_logits, sorted_indices = torch.sort(s, descending=False)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative_probs <= (1 - p)
    remove[..., -1:] = 0
    remove = remove.scatter(1, sorted_indices, remove)
    return s.masked_fill(remove, -float("inf"))


def _min_p(s: torch.Tensor, min_p: float) -> torch.Tensor:
    """HF ``MinPLogitsWarper`` (min_tokens_to_keep=1) on one row (1, V); ``min_p <= 0``: off."""
    if min_p <= 0.0:
        return s
    probs = torch.softmax(s, dim=-1)
    remove = probs < min_p * probs.amax(dim=-1, keepdim=True)
    remove.scatter_(-1, torch.topk(probs, 1, dim=-1).indices, False)
    return s.masked_fill(remove, -float("inf"))


def filtered_logits(row: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float,
                    top_k_first: bool) -> torch.Tensor:
    """One row (V,) float32 of finite-max logits -> the HF-filtered, temperature-scaled logits (V,).

    Kept tokens hold ``row / T``, dropped ones ``-inf``; ``softmax`` of the result is the distribution
    :func:`sample_ref` draws from.
    """
    s = (row / temperature)[None]
    if top_k_first:
        s = _top_p(_top_k(s, top_k), top_p)
    else:
        s = _top_k(_top_p(s, top_p), top_k)
    return _min_p(s, min_p)[0]


def prepare_scores(scores: torch.Tensor, ban: torch.Tensor | None, is_probs: bool) -> torch.Tensor:
    """(B, V) -> float32 logits with NaN -> -inf, probabilities -> log, banned tokens -> -inf."""
    x = scores.float()
    if is_probs:
        x = torch.log(x)  # p = 0 -> -inf; p < 0 -> NaN -> -inf below
    x = x.masked_fill(torch.isnan(x), -float("inf"))
    b, v = x.shape
    ban_t, _ = ban_rows(ban, b, v)
    if ban_t is not None:
        x = x.masked_fill(ban_t.reshape(-1, v).expand(b, v), -float("inf"))
    return x


def sample_ref(scores: torch.Tensor, seed: torch.Tensor, temperature: torch.Tensor | None,
               temperature_value: float, top_k: torch.Tensor | None, top_k_value: int,
               top_p: torch.Tensor | None, top_p_value: float, min_p: torch.Tensor | None,
               min_p_value: float, ban: torch.Tensor | None, is_probs: bool,
               top_k_first: bool) -> torch.Tensor:
    """Reference sampler (module docstring; argument meaning in ``rocm_inductor.ops.sampling.sample``).

    Randomness: a ``torch.Generator`` on ``scores``' device seeded with ``int(seed[0])`` (a host sync; this
    is a reference) drives ``torch.multinomial`` row by row.

    Args:
        scores: (B, V) float logits/probabilities, B >= 1, V >= 1.

    Returns:
        (B,) int64 token ids.
    """
    b, v = scores.shape
    x = prepare_scores(scores, ban, is_probs)
    ts = per_row(temperature, b, torch.float32)
    ks = per_row(top_k, b, torch.int64)
    ps = per_row(top_p, b, torch.float64)
    mps = per_row(min_p, b, torch.float64)
    gen = torch.Generator(device=scores.device)
    gen.manual_seed(int(seed.reshape(-1)[0].item()) & (2**63 - 1))
    out = torch.empty(b, dtype=torch.int64, device=scores.device)
    for r in range(b):
        row = x[r]
        t = float(ts[r]) if ts is not None else temperature_value
        mx = row.max()
        if t <= 0 or not torch.isfinite(mx):  # greedy, +inf present, or nothing finite
            out[r] = torch.argmax(row)
            continue
        k = int(ks[r]) if ks is not None else top_k_value
        p = float(ps[r]) if ps is not None else top_p_value
        mp = float(mps[r]) if mps is not None else min_p_value
        s = filtered_logits(row, t, k, p, mp, top_k_first)
        out[r] = torch.multinomial(torch.softmax(s, -1)[None], 1, generator=gen)[0, 0]
    return out


def exact_distribution(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float = 0.0,
                       top_k_first: bool = True) -> torch.Tensor:
    """The exact filtered distribution of one logits row, in float64 (for chi-square tests).

    The filters run in float64 (same HF rules, so the kept set only differs from float32 at an exact
    boundary tie), then ``softmax`` in float64.

    Args:
        logits: (V,) finite logits; other args as :func:`sample_ref`.

    Returns:
        (V,) float64 probabilities (zeros outside the kept set).
    """
    s = filtered_logits(logits.double(), temperature, top_k, top_p, min_p, top_k_first)
    return torch.softmax(s, -1)
