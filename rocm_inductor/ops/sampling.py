"""``rocm_fused::sample``: temperature / top-k / top-p / min-p sampling of one token per row.

Meaning (pure-torch reference: :func:`rocm_inductor.providers.reference.sample_ref`), per row of ``scores``:

1. NaN scores count as ``-inf`` (never drawn); probabilities (``is_probs``) become ``log(p)``; tokens where
   ``ban`` is true become ``-inf`` (HF's min-new-tokens floor: EOS masked while a row is too short).
2. Greedy rows return ``argmax`` (first index among ties): temperature <= 0, a row holding ``+inf``, or a row
   with no finite score (then 0, as ``torch.argmax`` of an all ``-inf`` row gives).
3. Other rows: ``s = scores / T``; then top-k (keep ``s >= k-th largest``, ties kept, as HF
   ``TopKLogitsWarper``) and top-p (HF ``TopPLogitsWarper``: drop tokens whose ascending cumulative
   probability is ``<= 1 - p``, the largest token always kept) in HF order (``top_k_first=True``: top-p on
   the renormalised top-k distribution) or top-p first; then min-p (drop ``prob < min_p * max_prob``,
   HF ``MinPLogitsWarper``); then one draw from ``softmax(s)`` over the kept tokens.

Filters that are off: ``top_k <= 0`` or ``top_k >= V``; ``top_p >= 1``; ``min_p <= 0``. ``top_p <= 0`` keeps
only the largest token(s). A per-row tensor (``temperature``, ``top_k``, ``top_p``, ``min_p``: numel 1 or B)
wins over the matching ``*_value`` scalar.

Randomness: ``seed`` is an int64 device tensor (numel >= 1, element 0 used) that the caller draws fresh per
call inside the graph (``torch.randint``), so a captured CUDA/HIP graph draws new numbers on every replay
(the generator's state advances per replay) and one seed value always gives the same tokens (for one
provider). Rows draw independent streams from it.

Compile-time spec keys read by providers' ``check`` (built by :func:`sample_spec`):
    dtype, vocab (int or None if symbolic), is_probs, top_k_first, per_row (set of per-row param names),
    has_min_p, has_ban, greedy (scalar temperature <= 0), cudagraphs (Inductor will capture the graph),
    has_top_k / has_top_p (the filter may be on: a per-row tensor or an active scalar; None = unknown).
"""

from __future__ import annotations

from typing import Any

import torch

from ..providers import _sampling_args, get_provider

#: Argument normalisation the providers share (re-exported: the op's argument helpers).
per_row, ban_rows = _sampling_args.per_row, _sampling_args.ban_rows


@torch.library.custom_op("rocm_fused::sample", mutates_args=())
def sample(
    scores: torch.Tensor, seed: torch.Tensor,
    temperature: torch.Tensor | None, temperature_value: float,
    top_k: torch.Tensor | None, top_k_value: int,
    top_p: torch.Tensor | None, top_p_value: float,
    min_p: torch.Tensor | None, min_p_value: float,
    ban: torch.Tensor | None,
    is_probs: bool, top_k_first: bool, keepdim: bool, provider: str,
) -> torch.Tensor:
    """Draw one token per row (see module docstring for the exact meaning).

    Args:
        scores: (B, V) float16/bfloat16/float32 logits (or probabilities when ``is_probs``); B may be 0.
        seed: int64 tensor, numel >= 1, on ``scores``' device.
        temperature / top_k / top_p / min_p: per-row tensors (numel 1 or B) or None; float / int / float /
            float dtypes (converted). ``*_value``: the scalar used when the tensor is None.
        ban: bool tensor broadcastable to (B, V) ((V,), (1, V) or (B, V)), True = never drawn; or None.
        is_probs: ``scores`` are probabilities (non-negative, any scale), not logits.
        top_k_first: HF order (top-k, then top-p on the renormalised top-k distribution); False = top-p
            first.
        keepdim: return (B, 1) (``multinomial(probs, 1)`` / ``argmax(..., keepdim=True)``), else (B,).
        provider: provider name baked in at compile time.

    Returns:
        int64 token ids in ``[0, V)``, (B,) or (B, 1), contiguous.

    Raises:
        ValueError: bad shapes/dtypes (scores not 2D, a per-row tensor of the wrong numel, V == 0 with B > 0).
        KeyError / ProviderUnavailable: unknown or unavailable provider.
    """
    _validate(scores, seed, temperature, top_k, top_p, min_p, ban)
    b = scores.shape[0]
    if b == 0:
        out = torch.empty(0, dtype=torch.int64, device=scores.device)
    else:
        out = get_provider(provider).sample(
            scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
            min_p, min_p_value, ban, is_probs, top_k_first)
        out = out.to(torch.int64).reshape(b)
    return (out.reshape(b, 1) if keepdim else out).contiguous()


@sample.register_fake
def _sample_fake(scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
                 min_p, min_p_value, ban, is_probs, top_k_first, keepdim, provider):
    shape = (scores.shape[0], 1) if keepdim else (scores.shape[0],)
    return torch.empty(shape, dtype=torch.int64, device=scores.device)


def _validate(scores, seed, temperature, top_k, top_p, min_p, ban) -> None:
    if scores.dim() != 2:
        raise ValueError(f"scores must be (B, V), got shape {tuple(scores.shape)}")
    b, v = scores.shape
    if v == 0 and b > 0:
        raise ValueError("scores has an empty vocabulary: no token can be drawn")
    if seed.numel() < 1 or seed.dtype != torch.int64:
        raise ValueError(f"seed must be an int64 tensor with at least one element, got {seed.dtype} "
                         f"of {seed.numel()} elements")
    for name, t in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p), ("min_p", min_p)):
        if t is not None and t.numel() not in (1, b):
            raise ValueError(f"{name} has {t.numel()} elements; need 1 or batch = {b}")
    if ban is not None:
        try:
            torch.broadcast_shapes(ban.shape, (b, v))
        except RuntimeError as e:
            raise ValueError(f"ban of shape {tuple(ban.shape)} does not broadcast to {(b, v)}") from e
        if ban.dim() > 2:
            raise ValueError(f"ban must have at most 2 dims, got {tuple(ban.shape)}")


def sample_spec(scores: Any, *, is_probs: bool, top_k_first: bool, per_row: set[str], has_min_p: bool,
                has_ban: bool, greedy: bool, cudagraphs: bool, has_top_k: bool | None = None,
                has_top_p: bool | None = None) -> dict[str, Any]:
    """Build the compile-time spec of a sampling match from the scores' fake tensor.

    Returns:
        dict with the keys listed in the module docstring.
    """
    v = scores.shape[-1] if scores.ndim else None
    return {
        "dtype": scores.dtype,
        "vocab": v if isinstance(v, int) else None,
        "is_probs": is_probs,
        "top_k_first": top_k_first,
        "per_row": frozenset(per_row),
        "has_min_p": has_min_p,
        "has_ban": has_ban,
        "greedy": greedy,
        "cudagraphs": cudagraphs,
        "has_top_k": True if has_top_k is None else has_top_k,
        "has_top_p": True if has_top_p is None else has_top_p,
    }
