"""``rocm_fused::sample`` through vendor samplers (FlashInfer, AMD's fork, AITER): limits and the call.

The vendor kernels only filter and draw; everything our op defines beyond that is done here in torch:
NaN -> -inf, ``log`` of probabilities, the ban mask, temperature, greedy rows (T <= 0, top_p <= 0, rows
holding +inf or nothing finite: ``argmax``, first index), top_k <= 0 or >= V -> V (FlashInfer returned
invalid ids for huge k, docs/vendors.md). Bad rows are replaced by zeros before the vendor call (all-NaN/-inf
rows read out of bounds or hung in FlashInfer, docs/vendors.md) and overwritten by the greedy result after.

Randomness (docs/vendors.md; read in flashinfer-ai/flashinfer ``flashinfer/sampling.py`` at v0.5.3-v0.6.18):
FlashInfer >= 0.6.4 (``seed: Optional[Union[int, torch.Tensor]]``, validated by the module's
``_validate_and_convert_seed_offset``: int64, 1-D, length 1 or B) and the fork's 0.6.18+amd line take
``seed``/``offset`` device tensors: capture-safe; we pass per-row seeds ``seed + row`` and zero offsets.
0.6.0-0.6.3 have ``seed: Optional[int]`` only (a host int: a tensor fails at run time, and an int read from
our seed tensor would need a host sync): treated like the releases before, which only take a ``generator``
whose host-side state a captured graph would bake in: refused at compile time when Inductor will capture
(``spec["cudagraphs"]``) and raising at run time under capture. :func:`device_seed` decides by the
parameter's type (or the helper), never by the name. We pass torch's default device generator explicitly
(the fork's 0.5.3 line makes a fresh generator per call otherwise: same draws every call). AITER's sampler
(``aiter.ops.sampling``, which ``aiter/__init__`` does not import) takes no seed at all: never under
capture. Verified on CPU stand-ins only.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

import torch

from ._sampling_args import ban_rows, per_row

SAMPLE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def takes(fn: Any, name: str) -> bool:
    """Whether callable ``fn`` has a parameter ``name`` (False when the signature can't be read)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def device_seed(fn: Any) -> bool:
    """Whether sampler ``fn`` takes ``seed``/``offset`` as device tensors (FlashInfer >= 0.6.4, fork 0.6.18+amd).

    True when its module has FlashInfer's ``_validate_and_convert_seed_offset`` (added with tensor seeds in
    0.6.4, flashinfer/sampling.py), or when ``seed``'s and ``offset``'s annotations name ``Tensor``. False for
    0.6.0-0.6.3 (``seed: Optional[int]``), for releases without ``seed`` (0.5.x), and when unreadable.
    """
    if not (takes(fn, "seed") and takes(fn, "offset")):
        return False
    mod = sys.modules.get(getattr(inspect.unwrap(fn), "__module__", None) or "")
    if callable(getattr(mod, "_validate_and_convert_seed_offset", None)):
        return True
    params = inspect.signature(fn).parameters
    return all("Tensor" in _annotation(params[n].annotation) for n in ("seed", "offset"))


def _annotation(ann: Any) -> str:
    """An annotation as text (``from __future__ import annotations`` leaves strings; typing objects repr)."""
    if ann is inspect.Parameter.empty:
        return ""
    return ann if isinstance(ann, str) else repr(ann)


def check_sample(label: str, fn: Any, spec: dict[str, Any], seeded: bool) -> str | None:
    """Reasons a vendor sampler ``fn`` can't serve the match ``spec`` (keys: ``rocm_inductor.ops.sampling``)."""
    if fn is None:
        return f"{label} has no top_k_top_p sampler in this release"
    if spec.get("dtype") not in SAMPLE_DTYPES:
        return f"{label} samples float16/bfloat16/float32 scores, got {spec.get('dtype')}"
    if spec.get("has_min_p"):
        return f"{label} has no sampler combining min-p with top-k/top-p"
    if not spec.get("top_k_first", True):
        return f"{label}'s filter orders are top_k_first / joint; top-p first is not one of them"
    if spec.get("cudagraphs") and not seeded:
        return (f"{label}'s sampler takes no device seed/offset tensors: a captured graph would replay the "
                "same draws (FlashInfer >= 0.6.4 / the fork's 0.6.18+amd take them)")
    return None


def prepare(scores, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value, ban, is_probs):
    """Torch-side part of the op: (scaled logits with bad rows zeroed, k (B,) int32, p (B,) f32, greedy mask,
    greedy tokens)."""
    b, v = scores.shape
    x = scores.float()
    if is_probs:
        x = torch.log(x)
    x = x.masked_fill(torch.isnan(x), -float("inf"))
    ban_t, _ = ban_rows(ban, b, v)
    if ban_t is not None:
        x = x.masked_fill(ban_t.reshape(-1, v).expand(b, v), -float("inf"))
    t = per_row(temperature, b, torch.float32)
    if t is None:
        t = torch.full((b,), float(temperature_value), device=x.device)
    p = per_row(top_p, b, torch.float32)
    if p is None:
        p = torch.full((b,), float(top_p_value), device=x.device)
    k = per_row(top_k, b, torch.int64)
    if k is None:
        k = torch.full((b,), int(top_k_value), device=x.device, dtype=torch.int64)
    # per-row parameters may arrive as CPU scalars lifted by Dynamo: move them to the logits' device
    t, p, k = t.to(x.device), p.to(x.device), k.to(x.device)
    k = torch.where((k <= 0) | (k >= v), v, k).to(torch.int32)
    mx = x.amax(-1)
    greedy = (t <= 0) | (p <= 0) | ~torch.isfinite(mx)
    greedy_tok = torch.argmax(x, -1)
    y = x / torch.where(t <= 0, 1.0, t)[:, None]
    y = torch.where(greedy[:, None], 0.0, y)
    return y, k, p.clamp(max=1.0), greedy, greedy_tok


def flashinfer_sample(sampling: Any, scores, seed, temperature, temperature_value, top_k, top_k_value, top_p,
                      top_p_value, ban, is_probs, label: str) -> torch.Tensor:
    """Sample through ``sampling.top_k_top_p_sampling_from_logits`` (FlashInfer or the fork).

    Returns:
        (B,) int64 ids in [0, V).

    Raises:
        RuntimeError: a release without seed/offset called while a CUDA/HIP graph is being captured.
    """
    fn = sampling.top_k_top_p_sampling_from_logits
    y, k, p, greedy, greedy_tok = prepare(scores, temperature, temperature_value, top_k, top_k_value, top_p,
                                          top_p_value, ban, is_probs)
    b, v = y.shape
    kw: dict[str, Any] = {}
    if takes(fn, "filter_apply_order"):
        kw["filter_apply_order"] = "top_k_first"
    if device_seed(fn):
        kw["seed"] = seed.reshape(-1)[:1] + torch.arange(b, device=y.device)
        kw["offset"] = torch.zeros(b, dtype=torch.int64, device=y.device)
    else:
        if y.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{label}: this release's sampler takes no seed/offset tensors; it cannot run "
                               "under CUDA/HIP graph capture (a replay would repeat the same tokens)")
        if y.is_cuda and takes(fn, "generator"):
            kw["generator"] = torch.cuda.default_generators[y.device.index or 0]
    tok = fn(y.contiguous(), k, p, **kw).to(torch.int64)
    return torch.where(greedy, greedy_tok, tok).clamp_(0, v - 1)


def aiter_sampler(lib: Any) -> Any:
    """AITER's ``top_k_top_p_sampling_from_probs`` from ``aiter.ops.sampling``, or None.

    ``aiter/__init__`` does not import ``aiter.ops.sampling`` (v0.1.5-v0.1.20), so it is imported here.
    """
    name = getattr(lib, "__name__", "aiter")
    try:
        mod = importlib.import_module(f"{name}.ops.sampling")
    except Exception:  # not shipped, or fails to build: the provider refuses with a reason
        return None
    return getattr(mod, "top_k_top_p_sampling_from_probs", None)


def check_aiter_sample(fn: Any, spec: dict[str, Any]) -> str | None:
    """:func:`check_sample` plus AITER's filter order.

    AITER applies top-p to the *un-renormalised* mass of the tokens that also pass top-k (``aiter/ops/
    sampling.py`` v0.1.20: "aiter's original-mass top-p semantics"), not to the renormalised top-k
    distribution (HF order): refused when both filters may be on (``spec["has_top_k"]`` and
    ``spec["has_top_p"]``; unknown counts as on).
    """
    if spec.get("cudagraphs"):
        return "aiter's samplers take no seed (host generator state): never under graph capture"
    reason = check_sample("aiter", fn, spec, seeded=False)
    if reason is None and spec.get("has_top_k", True) and spec.get("has_top_p", True):
        reason = ("aiter applies top-p to the un-renormalised top-k mass, not HF's order (top-p on the "
                  "renormalised top-k distribution): only with top-k or top-p off")
    return reason


def aiter_sample(fn: Any, scores, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value, ban,
                 is_probs) -> torch.Tensor:
    """Sample through AITER's probs sampler (never under capture: it reads host generator state).

    Called positionally as the real signature reads (``aiter.ops.sampling``, v0.1.5-v0.1.20):
    ``(probs, indices, maybe_top_k_arr, top_k_val, maybe_top_p_arr, top_p_val, deterministic=False)``, with
    float32 probs, ``indices=None``, (B,) int32 top-k and (B,) float32 top-p arrays (the dtypes its wrapper
    converts to). Returns (B,) int64 ids.

    Raises:
        RuntimeError: called during graph capture.
    """
    y, k, p, greedy, greedy_tok = prepare(scores, temperature, temperature_value, top_k, top_k_value, top_p,
                                          top_p_value, ban, is_probs)
    if y.is_cuda and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("aiter's samplers take no seed: they cannot run under HIP graph capture")
    probs = torch.softmax(y, -1).contiguous()
    v = y.shape[1]
    tok = fn(probs, None, k.to(torch.int32), v, p.to(torch.float32), 1.0, False).to(torch.int64)
    return torch.where(greedy, greedy_tok, tok.reshape(-1)).clamp_(0, v - 1)
