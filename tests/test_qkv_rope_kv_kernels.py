"""``rocm_fused::qkv_rope_kv`` on the Triton provider (TRITON_INTERPRET=1 on CPU, set in conftest) against the
pure-torch reference (the composition of ``rms_norm_gemm`` / ``merged_gemm`` and ``rope_kv_write``): q, both caches
and the residual sum, the split-free tile choice, the provider's ``check`` refusals and the AOT case list.

Numerics: the numerics contract (docs/ops.md, ``graph_utils.assert_contract``: error vs float64 no worse than the
same-dtype reference's plus one ulp), as tests/test_norm_gemm.py holds the fold's GEMM outputs to (accumulation
order and, on the dot tile, the place of the norm's rounding differ); the residual sum, the cache rows outside
``positions`` and a position outside the cache bitwise. Shapes are small (K 64-256, 8 q heads): the interpreter.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from graph_utils import assert_contract

import rocm_inductor  # noqa: F401  (registers the ops)
from rocm_inductor.providers.reference import qkv_rope_kv_ref
from rocm_inductor.providers.triton import qkv_rope_kv as tq
from rocm_inductor.providers.triton.gemm_configs import Config

OP = torch.ops.rocm_fused.qkv_rope_kv.default
MAX_LEN = 16


def _full_k(m: int, k: int, block_n: int = 4) -> Config:
    """The full-K GEMV tile (decode M = 1..8): BLOCK_M the next power of two >= M, BLOCK_K the next >= K."""
    return Config(1 << max(m - 1, 0).bit_length(), block_n, 1 << (k - 1).bit_length(), 1, 4, 1, False, False,
                  True, True)


def _inputs(dtype, b, s, k, d, rd, half=False, norm="add", bias=False, hq=8, hkv=2, pos=None, seed=0):
    """HF decode layout: x (b, s, k), q/k/v weights (h * d, k) x 0.05, cos/sin (b, 1, s, width), caches
    (b, hkv, MAX_LEN, d); ``norm``: "add" (residual + RMSNorm), "plain" (RMSNorm) or None (eps None)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, s, k, generator=g).to(dtype)
    r = torch.randn(b, s, k, generator=g).to(dtype) if norm == "add" else None
    gw = (torch.rand(k, generator=g) + 0.5).to(dtype) if norm else None
    ws = [(torch.randn(n * d, k, generator=g) * 0.05).to(dtype) for n in (hq, hkv, hkv)]
    bs = [torch.randn(w.shape[0], generator=g).to(dtype) if bias else None for w in ws]
    w = rd // 2 if half else rd
    cos = torch.randn(b, 1, s, w, generator=g).to(dtype)
    sin = torch.randn(b, 1, s, w, generator=g).to(dtype)
    kc = torch.randn(b, hkv, MAX_LEN, d, generator=g).to(dtype)
    vc = torch.randn(b, hkv, MAX_LEN, d, generator=g).to(dtype)
    pos = torch.tensor(pos if pos is not None else [5, 9, 2][:s])
    return [x, r, gw, None if norm is None else 1e-6, 0.0, ws, bs, cos, sin, kc, vc, pos]


def _double(args):
    """The inputs in float64 (caches copied), for the float64 reference."""
    f = lambda t: None if t is None else t.double()  # noqa: E731
    x, r, gw, eps, off, ws, bs, cos, sin, kc, vc, pos = args
    return [f(x), f(r), f(gw), eps, off, [f(w) for w in ws], [f(v) for v in bs], f(cos), f(sin), f(kc), f(vc), pos]


def _run_and_compare(args, rd, interleaved, half, config=None):
    """Triton vs the same-dtype reference vs float64: q, the written cache rows, the rest of the caches, s."""
    kc, vc, pos = args[9], args[10], args[11]
    ref_args = [*args[:9], kc.clone(), vc.clone(), pos]
    got_args = [*args[:9], kc.clone(), vc.clone(), pos]
    a64 = _double(args)
    eager = qkv_rope_kv_ref(*ref_args, rd, interleaved, half)
    ref64 = qkv_rope_kv_ref(*a64, rd, interleaved, half)
    outs = tq.qkv_rope_kv(*got_args, rd, interleaved, half, config=config)
    x, hq, d = args[0], args[5][0].shape[0] // kc.shape[-1], kc.shape[-1]
    b, s = x.shape[0] * x.shape[1] // pos.shape[0], pos.shape[0]
    assert len(outs) == len(eager) == 1 + (args[1] is not None)
    q = outs[0]
    assert q.shape == (b, hq, s, d) and q.is_contiguous() and q.dtype == x.dtype
    assert_contract(q, eager[0], ref64[0])
    keep = (pos >= 0) & (pos < MAX_LEN)
    written = pos[keep]
    for got, want, want64, orig in ((got_args[9], ref_args[9], a64[9], kc), (got_args[10], ref_args[10], a64[10], vc)):
        assert_contract(got[:, :, written], want[:, :, written], want64[:, :, written])
        rest = torch.ones(MAX_LEN, dtype=torch.bool)
        rest[written] = False
        assert torch.equal(got[:, :, rest], orig[:, :, rest])  # slots not at a (valid) position: untouched
    if args[1] is not None:
        assert outs[1].shape == x.shape and torch.equal(outs[1], eager[1])  # the residual sum: one rounding, bitwise
    return outs, got_args


@pytest.mark.parametrize("dtype,b,s,k,d,rd,interleaved,half,norm,bias,full", [
    (torch.bfloat16, 1, 1, 128, 64, 64, False, False, "add", False, True),   # Llama-like M = 1, GEMV tile, GQA 8/2
    (torch.float16, 1, 1, 96, 128, 32, True, True, "plain", False, True),    # GPT-J partial, half table, masked K
    (torch.bfloat16, 2, 1, 64, 64, 64, False, False, None, True, True),      # no norm, biases, B = 2 on the GEMV tile
    (torch.bfloat16, 4, 1, 128, 64, 64, True, False, "add", False, False),   # M = 4: the dot tile's prologue
    (torch.float32, 8, 1, 64, 128, 32, False, True, None, True, False),      # fp32 IEEE dot, partial NeoX, biases
    (torch.float16, 8, 1, 64, 64, 64, False, False, "add", False, False),    # fp16 + norm at M = 8: the GEMV tile
    (torch.bfloat16, 8, 2, 256, 64, 64, False, False, "plain", False, False),  # M = 16, S = 2
])
def test_triton_matches_reference(dtype, b, s, k, d, rd, interleaved, half, norm, bias, full):
    args = _inputs(dtype, b, s, k, d, rd, half, norm, bias)
    m = b * s
    cfg = _full_k(m, k) if full else None
    if not full:  # the launcher's own pick (CPU: the GEMM's default dot tile, made split-free)
        picked = tq.launch_config(args[0].reshape(m, k), args[5], args[6], norm is not None)
        assert picked.split_k == 1 and picked.block_m >= m
        assert picked.dot == (dtype != torch.float16 or norm is None)  # fp16 + norm: the full-K GEMV tile
    _run_and_compare(args, rd, interleaved, half, config=cfg)


def test_positions_outside_the_cache_write_nothing():
    """S = 2 with one position past the cache and B = 2: only the valid slot of each cache changes."""
    args = _inputs(torch.bfloat16, 2, 2, 64, 64, 32, norm="add", pos=[3, MAX_LEN])
    _, got = _run_and_compare(args, 32, False, False, config=_full_k(4, 64))
    for new, old in ((got[9], args[9]), (got[10], args[10])):
        assert (new != old).any(-1).any(0).any(0).nonzero().flatten().tolist() == [3]
    args = _inputs(torch.float32, 1, 2, 64, 64, 64, norm=None, pos=[-1, 7])
    _, got = _run_and_compare(args, 64, True, False)
    assert (got[9] != args[9]).any(-1).any(0).any(0).nonzero().flatten().tolist() == [7]


def test_op_on_both_providers():
    """The op (its checks, then the provider): triton against reference on the same inputs."""
    args = _inputs(torch.float32, 2, 1, 64, 64, 64, norm="add")
    res = {}
    for prov in ("reference", "triton"):
        a = [*args[:9], args[9].clone(), args[10].clone(), args[11]]
        res[prov] = (OP(*a, 64, False, False, prov), a[9], a[10])
    (q_r, s_r), kc_r, vc_r = res["reference"]
    (q_t, s_t), kc_t, vc_t = res["triton"]
    for got, want in ((q_t, q_r), (kc_t, kc_r), (vc_t, vc_r)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(s_t, s_r)


def test_tile_config_is_split_free():
    bf, fp16 = torch.bfloat16, torch.float16
    llama = Config(1, 2, 2048, 1, 8, 1, False, False, True, True)  # the measured q/k/v prologue tile at M = 1
    assert tq.tile_config(llama, 1, 2048, bf, True) == llama
    split_full = Config(1, 8, 1024, 2, 4, 1, False, False, True, True)
    c = tq.tile_config(split_full, 1, 2048, bf, False)
    assert c.full and c.split_k == 1 and c.block_k == 2048 and c.block_n * c.block_k <= 128 * c.num_warps * 32
    assert tq.tile_config(Config(1, 1, 2048, 1, 4, 1, False, False, True, True), 1, 2048, bf, True).block_n == 2
    dot_split = Config(16, 32, 256, 4, 8, 3, True)
    assert tq.tile_config(dot_split, 4, 2048, bf, False) == dataclasses.replace(dot_split, split_k=1)
    assert tq.tile_config(dot_split, 4, 2048, bf, True) == Config(16, 32, 64, 1, 8, 3, True)  # NORM_DOT_MK / 16
    assert tq.tile_config(dot_split, 4, 2048, fp16, True).full  # fp16 + norm at M <= 8: the GEMV tile
    assert tq.tile_config(dot_split, 16, 2048, fp16, True) is None
    late = Config(1, 16, 512, 2, 4, 3, False, True)  # a runtime-K-loop GEMV pick
    assert tq.tile_config(late, 1, 2048, bf, False).full


def _spec(dtype=torch.bfloat16, m=1, normed=True, d=64):
    from rocm_inductor.ops.qkv_rope_kv import qkv_rope_kv_spec

    x = torch.empty(m, 1, 128, dtype=dtype, device="meta")
    ws = [torch.empty(n * d, 128, dtype=dtype, device="meta") for n in (8, 2, 2)]
    kc = torch.empty(m, 2, MAX_LEN, d, dtype=dtype, device="meta")
    cos = torch.empty(m, 1, 1, d, dtype=dtype, device="meta")
    spec = qkv_rope_kv_spec(x, x if normed else None, torch.empty(128, dtype=dtype, device="meta") if normed else None,
                            normed, 0.0, ws, [None] * 3, cos, kc, torch.empty(1, dtype=torch.int64, device="meta"), d,
                            False, False, m)
    spec["device_type"] = "cpu"  # meta tensors stand for the CPU graph the interpreter runs
    return spec


def test_check_refuses_what_the_kernel_cannot_take():
    from rocm_inductor.providers import get_provider

    prov = get_provider("triton")
    assert tq.check(_spec()) is None and prov.check("qkv_rope_kv", _spec()) is None
    assert tq.check(_spec(torch.float16, m=8)) is None  # the GEMV tile's prologue
    assert tq.check(_spec(torch.float16, m=8, normed=False)) is None
    assert "float16" in tq.check(_spec(torch.float16, m=16))  # the dot prologue may overflow float16
    assert tq.check(_spec(torch.float16, m=16, normed=False)) is None
    assert "float32" in tq.check(_spec(torch.float64))
    assert "<= 32" in tq.check({**_spec(), "m": 64, "m_upper": 64})
    assert "not <= 32" in prov.check("qkv_rope_kv", {**_spec(), "m": None, "m_upper": None})
    assert "odd" in tq.check({**_spec(), "head_dim": 63, "rotary_dim": 62})
    assert "one dtype" in tq.check({**_spec(), "cache_dtype": torch.float16})
    assert "symbolic" in tq.check({**_spec(), "k": None})
    assert "three" in tq.check({**_spec(), "count": 2})
    assert "contiguous" in tq.check({**_spec(), "weight_k_contiguous": (True, False, True)})
    assert get_provider("reference").check("qkv_rope_kv", _spec(torch.float16, m=16)) is None


def test_launcher_raises_what_check_refuses():
    args = _inputs(torch.float16, 16, 1, 64, 64, 64, norm="add")
    with pytest.raises(ValueError, match="float16"):
        tq.qkv_rope_kv(*args, 64, False, False)
    args = _inputs(torch.bfloat16, 1, 1, 64, 64, 64, norm=None)
    with pytest.raises(ValueError, match="K split"):
        tq.qkv_rope_kv(*args, 64, False, False, config=Config(16, 16, 32, 2, 4, 3, True))
    args = _inputs(torch.bfloat16, 1, 1, 64, 64, 64, norm="add")
    with pytest.raises(ValueError, match="needs eps"):
        tq.qkv_rope_kv(*args[:3], None, *args[4:], 64, False, False)
    with pytest.raises(ValueError, match="M <= 32"):
        tq.qkv_rope_kv(*_inputs(torch.bfloat16, 33, 1, 64, 64, 64, norm=None), 64, False, False)


def test_aot_cases_listed():
    from rocm_inductor.providers.triton import _aot

    names = [c["name"] for m, c in _aot.discover() if m.endswith(".qkv_rope_kv_kernels")]
    assert names == ["llama1b_addnorm_gemvfull_m1_bf16", "llama1b_gemvfull_m1_bf16", "llama1b_addnorm_gemvfull_m8_fp16",
                     "llama1b_addnorm_dot_m8_bf16", "gptj_partial_half_dot_m4_bf16", "qwen2_bias_gemvfull_m2_fp16",
                     "norm_dot_m16_fp32"]
    # the float16 + norm M = 8 case is the tile the launcher runs there (Llama-3.2-1B, from the CPU default pick)
    (fp16,) = [c for m, c in _aot.discover() if c["name"] == "llama1b_addnorm_gemvfull_m8_fp16"]
    pick = tq.tile_config(Config(16, 16, 256, 1, 8, 3, True), 8, 2048, torch.float16, True)
    assert pick.full and (pick.block_m, pick.block_n, pick.block_k, pick.num_warps) == (
        fp16["constexprs"]["BLOCK_M"], fp16["constexprs"]["BLOCK_N"], fp16["constexprs"]["BLOCK_K"], fp16["num_warps"])
