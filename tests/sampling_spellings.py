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


# -- filter kinds in spellings the structural reads don't know (issue 32); each a function of (B, S, V) logits
# (or of what its source slices them to); every name says where the spelling comes from -----------------------------
def gpt2_top_k_expand(temperature: float = 0.8, top_k: int = 5):
    """huggingface/pytorch-pretrained-BERT ``examples/run_gpt2.py`` ``top_k_logits``: the k-th column
    ``values[:, -1].unsqueeze(1).expand_as(logits)``, dropped tokens filled with ``ones_like * -1e10``."""

    def fn(logits):
        logits = logits[:, -1, :] / temperature
        values, _ = torch.topk(logits, top_k)
        min_values = values[:, -1].unsqueeze(1).expand_as(logits)
        logits = torch.where(logits < min_values, torch.ones_like(logits, dtype=logits.dtype) * -1e10, logits)
        return torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1)

    return fn


def trtllm_top_k(top_k: int = 5):
    """NVIDIA/TensorRT-LLM ``tensorrt_llm/_torch/pyexecutor/sampler.py`` ``top_k_sampling_batch``: the k-th
    column ``values[:, -1].unsqueeze(-1).expand(batch_size, vocab_size)``, ``full_like(-inf)`` fill."""

    def fn(logits):
        logits = logits[:, -1].float()
        batch_size, vocab_size = logits.size()
        values, _ = torch.topk(logits, top_k, dim=-1)
        min_values = values[:, -1].unsqueeze(-1).expand(batch_size, vocab_size)
        logits = torch.where(logits < min_values, torch.full_like(logits, float("-inf")), logits)
        return torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1).squeeze(-1)

    return fn


def trtllm_top_p(top_p: float = 0.9):
    """TensorRT-LLM ``_torch/pyexecutor/sampler.py`` ``top_p_sampling_batch``: descending sort, ``cumsum > p``
    shifted right by a cloned slice (the first token always kept), scattered back, ``masked_fill(-inf)``."""

    def fn(logits):
        logits = logits[:, -1].float()
        sorted_logits, sorted_indices = torch.sort(logits, descending=True, dim=-1)
        cumulative_probs = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs > top_p
        sorted_indices_to_remove[:, 1:] = sorted_indices_to_remove[:, :-1].clone()
        sorted_indices_to_remove[:, 0] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        logits = logits.masked_fill(indices_to_remove, float("-inf"))
        return torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1).squeeze(-1)

    return fn


def hf_legacy_top_k_top_p(temperature: float = 0.7, top_k: int = 6, top_p: float = 0.9):
    """transformers <= 4.x ``top_k_top_p_filtering`` (T. Wolf's gist, ``run_generation.py``): top-k by
    ``logits[logits < topk(...)[0][..., -1, None]] = -inf`` (index_put), top-p with a descending sort and
    the shifted ``cumsum > p`` mask, ``logits[indices_to_remove] = -inf``."""

    def fn(logits):
        logits = logits[:, -1, :] / temperature
        indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]
        logits[indices_to_remove] = -float("Inf")
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs > top_p
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
        logits[indices_to_remove] = -float("Inf")
        return torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1)

    return fn


def top_p_pad_shift(top_p: float = 0.8):
    """The legacy shifted top-p mask written with ``F.pad(mask[..., :-1], (1, 0), value=False)`` (issue 32's
    example of a shifted mask)."""

    def fn(logits):
        s = logits[:, -1].float()
        sorted_logits, sorted_indices = torch.sort(s, descending=True)
        remove = sorted_logits.softmax(-1).cumsum(-1) > top_p
        remove = torch.nn.functional.pad(remove[..., :-1], (1, 0), value=False)
        remove = remove.scatter(-1, sorted_indices, remove)
        return torch.multinomial(torch.softmax(s.masked_fill(remove, -math.inf), -1), 1)

    return fn


def top_p_roll_shift(top_p: float = 0.8):
    """The legacy shifted top-p mask written with ``mask.roll(1, -1)`` and the first column cleared (issue 32's
    example of a shifted mask)."""

    def fn(logits):
        s = logits[:, -1].float()
        sorted_logits, sorted_indices = torch.sort(s, descending=True)
        remove = (sorted_logits.softmax(-1).cumsum(-1) > top_p).roll(1, -1)
        remove[:, 0] = False
        remove = remove.scatter(-1, sorted_indices, remove)
        return torch.multinomial(torch.softmax(s.masked_fill(remove, -math.inf), -1), 1)

    return fn


def top_k_slice_fill(top_k: int = 4):
    """Top-k with the k-th value as a slice ``v[:, -1:]`` and a finite ``-10000`` fill (issue 32's examples; the
    fp16-safe fill of many small samplers)."""

    def fn(logits):
        s = logits[:, -1].float()
        v, _ = torch.topk(s, top_k)
        s = s.masked_fill(s < v[:, -1:], -10000.0)
        return torch.multinomial(torch.softmax(s, -1), 1)

    return fn


def litgpt_top_k_scatter(temperature: float = 0.8, top_k: int = 5):
    """Lightning-AI/litgpt ``litgpt/generate/base.py`` ``sample``: top-k as
    ``torch.full_like(logits, -inf).scatter_(-1, i, v)`` (\"do not use torch.where as in nanogpt because it
    will repeat top-k collisions\"), then ``/ temperature``, softmax, ``multinomial_num_samples_1`` (the
    exponential race under compile)."""

    def fn(logits):
        logits = logits[:, -1]
        v, i = torch.topk(logits, min(top_k, logits.size(-1)))
        logits = torch.full_like(logits, float("-inf")).scatter_(-1, i, v)
        logits = logits / temperature
        probs = torch.nn.functional.softmax(logits, dim=-1)
        distribution = torch.empty_like(probs).exponential_(1)
        return torch.argmax(probs / distribution, dim=-1, keepdim=True)

    return fn


def litgpt_sample_1d(temperature: float = 0.8, top_k: int = 6, top_p: float = 0.8):
    """litgpt ``generate/base.py`` ``sample`` as written: 1-D ``logits[0, -1]``, top-k by scatter into a
    ``-inf`` row, ``/ temperature``, ``sample_top_p`` (ascending sort, ``<= 1 - top_p``, ``[-1:] = 0``,
    ``scatter(0, ...)``), softmax, the exponential race."""

    def fn(logits):
        logits = logits[0, -1]
        v, i = torch.topk(logits, min(top_k, logits.size(-1)))
        logits = torch.full_like(logits, float("-inf")).scatter_(-1, i, v)
        logits = logits / temperature
        sorted_logits, sorted_indices = torch.sort(logits, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
        sorted_indices_to_remove[-1:] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(0, sorted_indices, sorted_indices_to_remove)
        logits = logits.masked_fill(indices_to_remove, float("-inf"))
        probs = torch.nn.functional.softmax(logits, dim=-1)
        distribution = torch.empty_like(probs).exponential_(1)
        return torch.argmax(probs / distribution, dim=-1, keepdim=True)

    return fn


def vllm_top_k_only(temperature: float = 0.7, top_k: int = 5):
    """vllm-project/vllm ``v1/sample/ops/topk_topp_sampler.py`` ``apply_top_k_only`` after ``apply_temperature``
    (in place, ``logits.div_(temp)``): the k-th value ``logits.topk(k, dim=1).values.gather(1, k - 1)``,
    ``logits.masked_fill_(logits < kth, -inf)``, then ``random_sample`` (every row's k the same constant here)."""

    def fn(logits):
        logits = logits[:, -1].float().clone()  # the model's fresh float32 logits (a view of the input here)
        logits.div_(temperature)
        idx = torch.full((logits.shape[0], 1), top_k - 1, dtype=torch.long, device=logits.device)
        top_k_mask = logits.topk(top_k, dim=1).values.gather(1, idx)
        logits.masked_fill_(logits < top_k_mask, -float("inf"))
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        q = torch.empty_like(probs).exponential_()
        return probs.div_(q).argmax(dim=-1).view(-1)

    return fn


def vllm_top_k_top_p(top_k: int = 6, top_p: float = 0.8):
    """vLLM ``topk_topp_sampler.py`` ``apply_top_k_top_p`` (its torch fallback): ascending sort, top-k by the
    ``gather`` at ``V - k``, ``masked_fill_``, softmax, cumsum ``<= 1 - p``, ``[:, -1] = False``, scattered
    back; then ``random_sample``."""

    def fn(logits):
        logits = logits[:, -1].float()
        logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
        kidx = torch.full((logits.shape[0], 1), logits_sort.size(1) - top_k, dtype=torch.long, device=logits.device)
        top_k_mask = logits_sort < logits_sort.gather(1, kidx)
        logits_sort.masked_fill_(top_k_mask, -float("inf"))
        probs_sum = torch.cumsum(logits_sort.softmax(dim=-1), dim=-1)
        top_p_mask = probs_sum <= 1 - top_p
        top_p_mask[:, -1] = False
        logits_sort.masked_fill_(top_p_mask, -float("inf"))
        logits = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        q = torch.empty_like(probs).exponential_()
        return probs.div_(q).argmax(dim=-1).view(-1)

    return fn


def vllm_min_p(min_p: float = 0.3):
    """vLLM ``model_executor/layers/sampler.py`` ``_apply_min_p`` (v0): ``probs.max(dim=-1, keepdim=True)``,
    ``logits.masked_fill(probs < min_p * top_probs, -inf)`` (no keep-the-top-token scatter; in place, on a
    view of the graph's input, as v0 and v1 write it, Inductor's CPU code generation raises KeyError, with or
    without our passes); then v1's ``random_sample``."""

    def fn(logits):
        logits = logits[:, -1].float()
        probs = torch.softmax(logits, dim=-1)
        top_probs, _ = probs.max(dim=-1, keepdim=True)
        tokens_to_remove = probs < min_p * top_probs
        logits = logits.masked_fill(tokens_to_remove, -float("inf"))
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        q = torch.empty_like(probs).exponential_()
        return probs.div_(q).argmax(dim=-1).view(-1)

    return fn


def gpt_oss_mul_temperature(temperature: float = 0.7):
    """openai/gpt-oss ``gpt_oss/triton/model.py`` ``TokenGenerator.generate``: 1-D ``logits[-1]``,
    ``softmax(logits * (1.0 / temperature))``, ``multinomial(probs, 1)``."""

    def fn(logits):
        logits = logits[0, -1].to(dtype=torch.float32)
        probs = torch.softmax(logits * (1.0 / temperature), dim=-1)
        return torch.multinomial(probs, num_samples=1)

    return fn


def sglang_sorted_probs(top_k: int = 6, top_p: float = 0.8, min_p: float = 0.2):
    """sgl-project/sglang ``srt/layers/sampler.py`` ``top_k_top_p_min_p_sampling_from_probs_torch``: probs
    sorted descending, ``arange >= k`` zeroed, ``cumsum - p > top_p`` zeroed, ``p < p[:, 0] * min_p`` zeroed,
    ``multinomial`` in sorted order and ``gather`` back (every row's parameters the same constants here; its
    ``probs_sort[mask] = 0`` as ``masked_fill``: Inductor's CPU code generation raises KeyError on the
    index_put form, with or without our passes)."""

    def fn(logits):
        probs = torch.softmax(logits[:, -1].float(), dim=-1)
        probs_sort, probs_idx = probs.sort(dim=-1, descending=True)
        probs_sum = torch.cumsum(probs_sort, dim=-1)
        ranks = torch.arange(0, probs.shape[-1], device=probs.device).view(1, -1)
        probs_sort = probs_sort.masked_fill(ranks >= top_k, 0.0)
        probs_sort = probs_sort.masked_fill((probs_sum - probs_sort) > top_p, 0.0)
        min_p_thresholds = probs_sort[:, 0] * min_p
        probs_sort = probs_sort.masked_fill(probs_sort < min_p_thresholds.view(-1, 1), 0.0)
        sampled_index = torch.multinomial(probs_sort, num_samples=1)
        return torch.gather(probs_idx, dim=1, index=sampled_index).view(-1)

    return fn


def flashinfer_top_p_reference(top_p: float = 0.8):
    """flashinfer-ai/flashinfer ``tests/test_sampling.py``'s torch reference of ``top_p_sampling_from_probs``:
    ascending sort of the probabilities, ``cdf``, the kept mask scattered back with ``scatter_add_`` of
    ``cdf > 1 - p`` (without the test's 1e-4 slack), ``probs * mask`` to ``multinomial``."""

    def fn(logits):
        probs = torch.softmax(logits[:, -1].float(), dim=-1)
        sorted_prob, indices = torch.sort(probs, descending=False)
        cdf = torch.cumsum(sorted_prob, dim=-1)
        mask = torch.zeros_like(probs, dtype=torch.int32)
        mask.scatter_add_(1, indices, (cdf > (1 - top_p)).int())
        return torch.multinomial(probs * mask, num_samples=1)

    return fn


def vllm_min_p_top_p(min_p: float = 0.3, top_p: float = 0.6):
    """vLLM v1 ``Sampler.sample``'s order: ``apply_min_p`` (as in :func:`vllm_min_p`) *before*
    ``apply_top_k_top_p(logits, None, p)`` (ascending sort, cumsum ``<= 1 - p``, scattered back), then
    ``random_sample``. The op applies min-p after top-p (HF's order): named, left to Inductor with the reason."""

    def fn(logits):
        logits = logits[:, -1].float()
        probs = torch.softmax(logits, dim=-1)
        top_probs, _ = probs.max(dim=-1, keepdim=True)
        logits = logits.masked_fill(probs < min_p * top_probs, -float("inf"))
        logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
        top_p_mask = torch.cumsum(logits_sort.softmax(dim=-1), dim=-1) <= 1 - top_p
        top_p_mask[:, -1] = False
        logits_sort = logits_sort.masked_fill(top_p_mask, -float("inf"))
        logits = logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        q = torch.empty_like(probs).exponential_()
        return probs.div_(q).argmax(dim=-1).view(-1)

    return fn


#: The spellings above, by name (issue 32's "code outside the corpus"), each with the filtered distribution it
#: draws from as ``exact_distribution``'s (temperature, top_k, top_p, min_p, top_k_first).
KIND_SPELLINGS = {
    "gpt2_top_k_expand": (gpt2_top_k_expand(), (0.8, 5, 1.0, 0.0, True)),
    "trtllm_top_k": (trtllm_top_k(), (1.0, 5, 1.0, 0.0, True)),
    "trtllm_top_p": (trtllm_top_p(), (1.0, 0, 0.9, 0.0, True)),
    "hf_legacy_top_k_top_p": (hf_legacy_top_k_top_p(), (0.7, 6, 0.9, 0.0, True)),
    "top_p_pad_shift": (top_p_pad_shift(), (1.0, 0, 0.8, 0.0, True)),
    "top_p_roll_shift": (top_p_roll_shift(), (1.0, 0, 0.8, 0.0, True)),
    "top_k_slice_fill": (top_k_slice_fill(), (1.0, 4, 1.0, 0.0, True)),
    "litgpt_top_k_scatter": (litgpt_top_k_scatter(), (0.8, 5, 1.0, 0.0, True)),
    "litgpt_sample_1d": (litgpt_sample_1d(), (0.8, 6, 0.8, 0.0, True)),
    "vllm_top_k_only": (vllm_top_k_only(), (0.7, 5, 1.0, 0.0, True)),
    "vllm_top_k_top_p": (vllm_top_k_top_p(), (1.0, 6, 0.8, 0.0, True)),
    "vllm_min_p": (vllm_min_p(), (1.0, 0, 1.0, 0.3, True)),
    "gpt_oss_mul_temperature": (gpt_oss_mul_temperature(), (0.7, 0, 1.0, 0.0, True)),
    "sglang_sorted_probs": (sglang_sorted_probs(), (1.0, 6, 0.8, 0.2, False)),
    "flashinfer_top_p_reference": (flashinfer_top_p_reference(), (1.0, 0, 0.8, 0.0, True)),
}
