"""Sampling chains as real code spells them (SPELLINGS.md "Sampling"), for the sampling pass tests.

Each builder returns a function of last-position logits ``(B, V)`` (or ``(B, S, V)`` where noted) that
draws token ids, written the way HF ``generate`` (its logits processors, verbatim logic) and gpt-fast do.
"""

from __future__ import annotations

import math

import torch


def hf_top_k(scores: torch.Tensor, top_k: int) -> torch.Tensor:
    """HF ``TopKLogitsWarper.__call__`` (transformers 5.x)."""
    top_k = min(top_k, scores.size(-1))
    indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
    return scores.masked_fill(indices_to_remove, -float("inf"))


def hf_top_p(scores: torch.Tensor, top_p: float | torch.Tensor, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """HF ``TopPLogitsWarper.__call__`` (transformers 5.x)."""
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
    sorted_indices_to_remove[..., -min_tokens_to_keep:] = 0
    indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
    return scores.masked_fill(indices_to_remove, -float("inf"))


def hf_min_p(scores: torch.Tensor, min_p: float | torch.Tensor, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """HF ``MinPLogitsWarper.__call__`` (transformers 5.x)."""
    probs = torch.softmax(scores, dim=-1)
    top_probs = probs.amax(dim=-1, keepdim=True)
    scaled_min_p = min_p * top_probs
    tokens_to_remove = probs < scaled_min_p
    k = min(min_tokens_to_keep, probs.shape[-1])
    sorted_indices = torch.topk(probs, k, dim=-1).indices
    tokens_to_remove.scatter_(-1, sorted_indices, False)
    return scores.masked_fill(tokens_to_remove, -float("inf"))


def hf_sampler(temperature: float | None = None, top_k: int = 0, top_p: float = 1.0,
               top_p_first: bool = False, eos: list[int] | None = None, min_tokens_to_keep: int = 1,
               last_position: bool = True, min_p: float | None = None, min_p_first: bool = False):
    """HF generate's sampling step: [EOS floor] -> [/T] -> top-k -> top-p (or top-p first) -> [min-p] ->
    multinomial (``_get_logits_processor``'s warper order; ``min_p_first`` puts min-p before top-k/top-p,
    an order HF doesn't use).

    Like ``generate``, a filter whose value turns it off (top_k = 0, top_p = 1.0, T = 1.0, min_p = None) is
    not applied.
    """

    def fn(logits: torch.Tensor) -> torch.Tensor:
        scores = (logits[:, -1] if last_position else logits).float()
        if eos is not None:
            vocab_tensor = torch.arange(scores.shape[-1], device=scores.device)
            eos_mask = torch.isin(vocab_tensor, torch.tensor(eos, device=scores.device))
            scores = torch.where(eos_mask, -math.inf, scores)
        if temperature is not None and temperature != 1.0:
            scores = scores / temperature
        filters = []
        if top_k:
            filters.append(lambda s: hf_top_k(s, top_k))
        if top_p < 1.0:
            filters.append(lambda s: hf_top_p(s, top_p, min_tokens_to_keep))
        if top_p_first:
            filters.reverse()
        if min_p is not None:
            filters.insert(0 if min_p_first else len(filters), lambda s: hf_min_p(s, min_p, min_tokens_to_keep))
        for f in filters:
            scores = f(scores)
        probs = torch.softmax(scores, dim=-1)
        return torch.multinomial(probs, num_samples=1).squeeze(1)

    return fn


def gpt_fast_sampler(temperature: float = 0.8, top_k: int | None = 200):
    """gpt-fast ``sample``: logits / max(T, 1e-5), optional top-k pivot, softmax, exponential race."""

    def fn(logits: torch.Tensor) -> torch.Tensor:
        logits = logits[:, -1] / max(temperature, 1e-5)
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            pivot = v.select(-1, -1).unsqueeze(-1)
            logits = torch.where(logits < pivot, -float("Inf"), logits)
        probs = torch.nn.functional.softmax(logits, dim=-1)
        q = torch.empty_like(probs).exponential_(1)
        return torch.argmax(probs / q, dim=-1, keepdim=True).to(dtype=torch.int)

    return fn


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Greedy decoding: nothing random, left to Inductor."""
    return torch.argmax(logits[:, -1], dim=-1)


def per_row_temperature_sampler(top_k: int = 5):
    """Per-row temperature tensor (B, 1) (vLLM-style batches), then HF top-k, then multinomial."""

    def fn(logits: torch.Tensor, temps: torch.Tensor) -> torch.Tensor:
        scores = logits.float() / temps.unsqueeze(-1)
        scores = hf_top_k(scores, top_k)
        return torch.multinomial(torch.softmax(scores, -1), 1)

    return fn


def per_row_top_p_sampler(temperature: float = 1.0, top_k: int = 0, min_p: float | None = None):
    """Per-row top-p tensor (B,) (vLLM-style batches) in HF's spelling: [/T] -> [top-k] -> HF top-p with
    ``1 - top_p[:, None]`` -> [min-p] -> multinomial."""

    def fn(logits: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
        scores = logits.float()
        if temperature != 1.0:
            scores = scores / temperature
        if top_k:
            scores = hf_top_k(scores, top_k)
        scores = hf_top_p(scores, top_ps.unsqueeze(-1))
        if min_p is not None:
            scores = hf_min_p(scores, min_p)
        return torch.multinomial(torch.softmax(scores, -1), 1)

    return fn


def top_p_threshold_sampler():
    """Top-p whose per-row *threshold* tensor (B, 1) is passed in directly (``cumsum <= thr``)."""

    def fn(logits: torch.Tensor, thr: torch.Tensor) -> torch.Tensor:
        scores = logits.float()
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        remove = sorted_logits.softmax(dim=-1).cumsum(dim=-1) <= thr
        remove[..., -1:] = 0
        remove = remove.scatter(1, sorted_indices, remove)
        return torch.multinomial(torch.softmax(scores.masked_fill(remove, -float("inf")), -1), 1)

    return fn


# -- more public samplers (docs/spellings.md and beyond); each a function of (B, S, V) logits ------------------------
def nanogpt_sampler(temperature: float = 0.8, top_k: int = 5):
    """karpathy/nanoGPT ``model.py`` ``generate``: ``logits[:, -1, :] / temperature``, top-k by boolean index
    assignment ``logits[logits < v[:, [-1]]] = -inf``, softmax, ``torch.multinomial(probs, 1)``."""

    def fn(logits):
        logits = logits[:, -1, :] / temperature
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("Inf")
        probs = torch.nn.functional.softmax(logits, dim=-1)
        return torch.multinomial(probs, num_samples=1)

    return fn


def meta_llama_sampler(temperature: float = 0.6, top_p: float = 0.9):
    """meta-llama/llama ``generation.py``: ``softmax(logits[:, -1] / temperature)`` then ``sample_top_p``
    (descending sort, ``probs_sum - probs_sort > p`` zeroed, renormalised, multinomial, gather)."""

    def fn(logits):
        probs = torch.softmax(logits[:, -1] / temperature, dim=-1)
        probs_sort, probs_idx = torch.sort(probs, dim=-1, descending=True)
        probs_sum = torch.cumsum(probs_sort, dim=-1)
        mask = probs_sum - probs_sort > top_p
        probs_sort[mask] = 0.0
        probs_sort.div_(probs_sort.sum(dim=-1, keepdim=True))
        next_token = torch.multinomial(probs_sort, num_samples=1)
        return torch.gather(probs_idx, -1, next_token)

    return fn


def vllm_random_sample():
    """vLLM ``v1/sample/ops/topk_topp_sampler.py`` ``random_sample`` on ``logits.softmax(-1, dtype=float32)``:
    ``q.exponential_()``, ``probs.div_(q).argmax(dim=-1).view(-1)`` (in-place exponential race)."""

    def fn(logits):
        probs = logits[:, -1].softmax(dim=-1, dtype=torch.float32)
        q = torch.empty_like(probs)
        q.exponential_()
        return probs.div_(q).argmax(dim=-1).view(-1)

    return fn


def gumbel_max_sampler(temperature: float = 0.7):
    """The Gumbel-max trick (Gumbel 1954; as in ``torch.nn.functional.gumbel_softmax(hard=True)``'s noise,
    ``-log(-log(u))``): ``argmax(logits / T - log(-log(u)))`` draws from softmax(logits / T)."""

    def fn(logits):
        s = logits[:, -1].float() / temperature
        u = torch.rand_like(s)
        return torch.argmax(s - torch.log(-torch.log(u)), dim=-1)

    return fn


def gpt_fast_sample_with_probs(temperature: float = 0.8, top_k: int = 5):
    """gpt-fast ``generate.py`` ``sample``: returns ``(idx_next, probs)``, so the filtered distribution escapes."""

    def fn(logits):
        logits = logits[:, -1] / max(temperature, 1e-5)
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        pivot = v.select(-1, -1).unsqueeze(-1)
        logits = torch.where(logits < pivot, -float("Inf"), logits)
        probs = torch.nn.functional.softmax(logits, dim=-1)
        q = torch.empty_like(probs).exponential_(1)
        return torch.argmax(probs / q, dim=-1, keepdim=True).to(dtype=torch.int), probs

    return fn
