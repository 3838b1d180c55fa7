"""Triton grouped small-M GEMM (``rocm_fused::merged_gemm``): the launcher, its config pick and the op's limits.

Up to four GEMMs of one activation in one launch (two with split-K): ``out[i] = x @ w_i.T (+ b_i)``, exactly
:func:`rocm_inductor.providers.reference.merged_gemm_ref`. The kernels and their math, layout and measurements
are in ``gemm_kernels``; the configs that exist for a shape in ``gemm_configs``; what the device measured in
``gemm_tables``; the switches in ``gemm_knobs``. This module:

- :func:`merged_gemm` validates (:func:`validated`), picks a config (:func:`pick_config`) and launches
  (:func:`launch`, also the RMSNorm-prologue form for ``norm_gemm``, :class:`NormPrologue`);
- :func:`pick_config`: the measured table's config first (``gemm_tables.table_config``), else, on a GPU, the
  first call of a shape outside a capture times every ``gemm_configs.candidates`` config with
  ``triton.testing.do_bench`` (L2 flushed between runs; whole launches, the split-K reduction included) and keeps
  the fastest for that shape key; else (interpreter, graph capture of an untuned shape, tuning off:
  ``ROCM_FUSED_GEMM_TUNE=0``) ``gemm_configs.default_config``;
- PDL (:func:`use_pdl`): programmatic dependent launch where the switch (``gemm_knobs.Knobs.pdl``, off) and the
  device allow it;
- :func:`check`: the compile-time limits the provider reports, the measured table's refusals included.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch
import triton

from .._gemm_limits import MAX_WEIGHTS, single_refused
from . import gemm_kernels as kernels
from . import gemm_knobs as knobs
from ._launch import on_device
from .gemm_configs import (
    DTYPES,
    MAX_M,
    Config,
    _sms,
    candidates,
    default_config,
    dot_prologue_fits,
    prologue_fits,
    warp_size,
)
from .gemm_tables import measured_loss, measured_single, table_config


def _interpreting() -> bool:
    from . import interpreting

    return interpreting()


def _capturing(x: torch.Tensor) -> bool:
    """True while a CUDA/HIP graph is being captured on the current stream (tests patch this)."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


@functools.cache
def triton_has_pdl() -> bool:
    """Whether the installed Triton has PDL: ``gdc_wait`` / ``gdc_launch_dependents`` and the NVIDIA backend's
    ``launch_pdl`` launch option (a field of its ``CUDAOptions``; triton 3.6 and 3.9 have both)."""
    if not kernels.HAS_GDC:
        return False
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except Exception:  # no NVIDIA backend in this Triton (e.g. a ROCm-only build)
        return False
    return "launch_pdl" in getattr(CUDAOptions, "__dataclass_fields__", {})


def pdl_available(x: torch.Tensor) -> bool:
    """True where PDL can be used for a launch on ``x``'s device: a CUDA (not HIP) tensor on sm_90 or newer,
    outside Triton's interpreter, with :func:`triton_has_pdl`."""
    if _interpreting() or not x.is_cuda or getattr(torch.version, "hip", None):
        return False
    if torch.cuda.get_device_capability(x.device)[0] < 9:
        return False
    return triton_has_pdl()


def use_pdl(x: torch.Tensor, weights: list[torch.Tensor]) -> bool:
    """Whether this launch uses PDL: ``gemm_knobs.Knobs.pdl`` (or ``ROCM_FUSED_GEMM_PDL``) on, :func:`pdl_available`,
    and every weight an ``nn.Parameter`` (the PDL form reads the weights before ``gdc_wait()``: a weight computed by
    the preceding kernel, e.g. a dequantized one or the ``.contiguous()`` copy :func:`merged_gemm` makes,
    could be read before it is written; under torch.compile the parameters reach the op as Parameters, seen
    on CPU with the Triton interpreter; freezing's constants are plain tensors, so no PDL there)."""
    wanted = knobs.current().pdl is not False
    return (wanted and all(isinstance(w, torch.nn.Parameter) for w in weights) and pdl_available(x))


#: Launches of the main kernel in this process with PDL on / off (benchmarks read it; CUDA-graph replays are
#: not launches: one count per capture).
PDL_LAUNCHES = {"on": 0, "off": 0}

#: shape key -> the config tuning picked (this process).
_TUNED: dict[tuple, Config] = {}


def _key(x: torch.Tensor, weights, biases) -> tuple:
    return (x.shape[0], x.shape[1], tuple(w.shape[0] for w in weights), x.dtype,
            tuple(b is not None for b in biases), str(x.device))


@dataclasses.dataclass(frozen=True)
class NormPrologue:
    """The RMSNorm whose output a launch's GEMM reads (``launch(..., norm=...)``): x is then its *input*.

    Attributes:
        residual: (M, K) with unit column stride, or None (plain RMSNorm); its sum with x is stored to ``s_out``.
        weight: (K,) norm weight of any float dtype, or None (weightless); eps, offset: as ``rocm_fused::rms_norm``.
        s_out: (M, K) contiguous tensor of x's dtype for ``x + residual`` (None without a residual). Not written
            when M, an N or K is 0 (:func:`launch` returns before the kernel; ``norm_gemm.rms_norm_gemm`` takes the
            two-launch path there).
    """

    residual: torch.Tensor | None
    weight: torch.Tensor | None
    eps: float
    offset: float
    s_out: torch.Tensor | None


def launch(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None], cfg: Config,
           outs: list[torch.Tensor] | None = None, norm: NormPrologue | None = None) -> list[torch.Tensor]:
    """Run ``cfg`` once (no checks beyond shapes; :func:`merged_gemm` validates). Returns the outputs.

    ``norm``: x is the input of that RMSNorm and the GEMM reads its output (one launch; ``cfg`` must pass
    :func:`prologue_fits` or :func:`gemm_configs.dot_prologue_fits`, else ValueError). ValueError too where
    ``cfg.block_m < M`` (one M block)."""
    m, k = x.shape
    ns = [w.shape[0] for w in weights]
    if outs is None:
        outs = [torch.empty((m, n), dtype=x.dtype, device=x.device) for n in ns]
    if m == 0 or any(n == 0 for n in ns):
        return outs
    if k == 0:
        for o, b in zip(outs, biases, strict=True):
            o.copy_(b.expand_as(o) if b is not None else torch.zeros_like(o))
        return outs
    nw = len(weights)
    blocks = [triton.cdiv(n, cfg.block_n) for n in ns]
    cum = [sum(blocks[: i + 1]) for i in range(nw)]
    c1, c2, c3 = (cum + [cum[-1]] * 3)[:3]
    ntot = sum(ns)
    pad = lambda seq, fill: list(seq) + [fill] * (MAX_WEIGHTS - nw)  # noqa: E731
    ws = pad(weights, weights[0])
    bs = [b if b is not None else weights[0] for b in biases]
    bs = pad(bs, bs[0])
    ys = pad(outs, outs[0])
    nsp = pad(ns, ns[0])
    sw = pad([w.stride(0) for w in weights], weights[0].stride(0))
    hb = pad([b is not None for b in biases], False)
    split = cfg.split_k
    if cfg.block_m < m:  # one program per column block covers every row: rows past BLOCK_M would stay unwritten
        raise ValueError(f"config BLOCK_M {cfg.block_m} < M {m}: the kernel's grid has no M dimension")
    if cfg.full and not cfg.dot and cfg.block_k * split < k:
        raise ValueError(f"full-K GEMV tile needs BLOCK_K * SPLIT_K >= K, got {cfg.block_k} * {split} < {k}")
    if norm is not None and not (prologue_fits(cfg, k) or dot_prologue_fits(cfg, x.dtype)):
        raise ValueError(f"an RMSNorm prologue needs the full-K GEMV tile or a bf16/fp32 dot tile, without a K "
                         f"split, got {cfg}")
    work = torch.empty((split, m, ntot), dtype=torch.float32, device=x.device) if split > 1 else outs[0]
    nrm = {"R": x, "G": x, "S": x, "stride_rm": 0, "eps": 0.0, "offset": 0.0}
    if norm is not None:
        nrm = {"R": x if norm.residual is None else norm.residual, "G": x if norm.weight is None else norm.weight,
               "S": x if norm.s_out is None else norm.s_out,
               "stride_rm": 0 if norm.residual is None else norm.residual.stride(0),
               "eps": float(norm.eps), "offset": float(norm.offset)}
    even_k = k % (cfg.block_k * split) == 0
    manual = _interpreting()
    ieee = x.dtype == torch.float32
    pdl = use_pdl(x, weights)
    extra = {"launch_pdl": True} if pdl else {}  # never passed where the backend lacks the option
    PDL_LAUNCHES["on" if pdl else "off"] += 1

    def run():
        kernels._merged_gemm_kernel[(cum[-1], split)](
            x, *ws, *bs, *ys, work, nrm["R"], nrm["G"], nrm["S"], m, k, *nsp, *sw, c1, c2, c3, ntot, x.stride(0),
            x.stride(1), nrm["stride_rm"], nrm["eps"], nrm["offset"],
            NUM_W=nw, HB0=hb[0], HB1=hb[1], HB2=hb[2], HB3=hb[3], BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            BLOCK_K=cfg.block_k, SPLIT_K=split, EVEN_K=even_k, DOT=cfg.dot, IEEE=ieee, MANUAL_BF16=manual,
            LATE=cfg.late and not cfg.dot, FULL=cfg.full and not cfg.dot, EVICT=cfg.evict and not cfg.dot,
            PDL=pdl, NORM=norm is not None, HAS_RES=norm is not None and norm.residual is not None,
            HAS_G=norm is not None and norm.weight is not None, num_warps=cfg.num_warps,
            num_stages=cfg.num_stages, **extra)
        if split > 1:
            kernels._reduce_kernel[(cum[-1],)](
                work, *bs, *ys, m, *nsp, c1, c2, c3, ntot, NUM_W=nw, HB0=hb[0], HB1=hb[1], HB2=hb[2],
                HB3=hb[3], SPLIT_K=split, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, MANUAL_BF16=manual,
                num_warps=4)

    with on_device(x):
        run()
    return outs


def _tune(x, weights, biases, key) -> Config:
    """Time every :func:`candidates` config once for this shape (whole launches) and keep the fastest."""
    from triton.testing import do_bench

    m, k = x.shape
    ns = tuple(w.shape[0] for w in weights)
    outs = [torch.empty((m, n), dtype=x.dtype, device=x.device) for n in ns]
    best, best_ms = None, float("inf")
    for cfg in candidates(m, ns, k, x.dtype, _sms(), warp_size()):
        try:
            ms = do_bench(lambda cfg=cfg: launch(x, weights, biases, cfg, outs), warmup=3, rep=10)
        except Exception:  # a config this device cannot compile/launch (resources): skip it
            continue
        if ms < best_ms:
            best, best_ms = cfg, ms
    return best or default_config(m, ns, k, x.dtype, warp=warp_size())


def pick_config(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]) -> Config:
    """The config for this call: the measured table's (:func:`table_config`), else tuned once per shape on a
    GPU outside capture, else :func:`default_config`."""
    key = _key(x, weights, biases)
    if key in _TUNED:
        return _TUNED[key]
    m, k = x.shape
    ns = tuple(w.shape[0] for w in weights)
    if x.is_cuda and not _interpreting():
        cfg = table_config(m, k, ns, x.dtype)
        if cfg is not None:  # measured (a pure lookup: safe under capture)
            _TUNED[key] = cfg
            return cfg
    if _interpreting() or not x.is_cuda or _capturing(x) or not knobs.current().tune:
        return default_config(m, ns, k, x.dtype, warp=warp_size())
    cfg = _tune(x, weights, biases, key)
    _TUNED[key] = cfg
    return cfg


def merged_gemm(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                config: Config | None = None) -> list[torch.Tensor]:
    """``[x @ w.T (+ b)]`` for 1-4 weights in one launch (two with split-K); see the module docstring.

    Args:
        x: (M, K), M <= :data:`MAX_M`, float16/bfloat16/float32, any strides.
        weights: 1-:data:`MAX_WEIGHTS` tensors (N_i, K) of x's dtype; a weight whose K stride is not 1 is
            copied first (the pass never sends one; direct callers may).
        biases: (N_i,) of x's dtype or None, one per weight.
        config: run this :class:`Config` instead of the tuned/default one (tests, benchmarks).

    Returns:
        list of contiguous (M, N_i) tensors of x's dtype, float32-accumulated, rounded once (RTNE).

    Raises:
        ValueError: M > MAX_M, more than MAX_WEIGHTS weights, dtype/shape mismatch.
    """
    weights, biases = validated(x, weights, biases)
    cfg = config or pick_config(x, weights, biases)
    return launch(x, weights, biases, cfg)


def validated(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]
              ) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """The weights (unit K stride: copied where not) and biases (unit stride) :func:`launch` can read.

    Raises:
        ValueError: as :func:`merged_gemm`.
    """
    if x.dtype not in DTYPES:
        raise ValueError(f"triton merged_gemm takes float16/bfloat16/float32, got {x.dtype}")
    if x.ndim != 2 or x.shape[0] > MAX_M:
        raise ValueError(f"triton merged_gemm takes x of shape (M <= {MAX_M}, K), got {tuple(x.shape)}")
    if not 1 <= len(weights) <= MAX_WEIGHTS or len(biases) != len(weights):
        raise ValueError(f"triton merged_gemm takes 1-{MAX_WEIGHTS} weights with one bias slot each")
    for w, b in zip(weights, biases, strict=True):
        if w.dtype != x.dtype or w.ndim != 2 or w.shape[1] != x.shape[1]:
            raise ValueError(f"weight {w.dtype} {tuple(w.shape)} does not take x {x.dtype} {tuple(x.shape)}")
        if b is not None and (b.dtype != x.dtype or tuple(b.shape) != (w.shape[0],)):
            raise ValueError(f"bias {b.dtype} {tuple(b.shape)} does not fit weight {tuple(w.shape)}")
    weights = [w if w.stride(1) == 1 or w.shape[1] == 1 else w.contiguous() for w in weights]
    biases = [b if b is None or b.stride(0) == 1 else b.contiguous() for b in biases]
    return weights, biases



def dtype_and_bucket_refused(spec: dict[str, Any], op: str) -> str | None:
    """The input checks every decode-bucket GEMM kernel of ours shares (``merged_gemm``, ``glu_gemm``): a
    float16/bfloat16/float32 activation, weights and biases of its dtype, M's upper bound <= ``MAX_M``.

    Args:
        spec: a GEMM op's spec (``dtype``, ``weight_dtypes``, ``bias_dtypes``, ``m_upper``).
        op: the op's name, for the reason.

    Returns:
        ``None`` if they hold, else the reason in plain words.
    """
    dt = spec.get("dtype")
    if dt not in DTYPES:
        return f"triton {op} takes float16/bfloat16/float32, input is {str(dt).replace('torch.', '')}"
    if any(d != dt for d in spec.get("weight_dtypes", ())) or any(
            d is not None and d != dt for d in spec.get("bias_dtypes", ())):
        return "weights/biases of another dtype than the activation"
    upper = spec.get("m_upper")
    if upper is None or upper > MAX_M:
        return f"M (upper bound {upper}) is not <= {MAX_M}: the kernel is for decode buckets"
    return None

def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits of this kernel.

    Args:
        spec: keys of ``rocm_inductor.ops.gemm_merge.merged_gemm_spec``.

    Returns:
        ``None`` if the kernel takes it, else the reason in plain words.
    """
    if spec.get("device_type") == "cpu" and not _interpreting():  # a CPU graph on a GPU host
        return "CPU tensors: Triton runs them only under TRITON_INTERPRET=1"
    why = dtype_and_bucket_refused(spec, "merged_gemm")
    if why is not None:
        return why
    if not 1 <= spec.get("count", 0) <= MAX_WEIGHTS:
        return f"{spec.get('count')} weights; one launch takes 1-{MAX_WEIGHTS}"
    if spec.get("k") is None or any(n is None for n in spec.get("ns", (None,))):
        return "K or an N is symbolic (weights have static shapes in every model we target)"
    single = spec.get("count") == 1
    if single:  # before the layout check: a measured loss is reported whatever the layout
        why = measured_single(spec)
        if why is not None:
            return why
    if not all(spec.get("weight_k_contiguous", ())):
        why = "a weight is not contiguous along K (the kernel streams (N, K) rows with unit K stride)"
        if single:
            return single_refused(why)
        return why
    return None if single else measured_loss(spec)

