"""Triton decode-attention kernel (providers/triton/attention.py) against float64 SDPA over repeated K/V and the
reference; CPU under ``TRITON_INTERPRET=1`` (tiny shapes), bigger shapes and CUDA-graph replay on a GPU."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rocm_inductor.providers.reference_attention import decode_attention_ref

DEV = "cuda" if torch.cuda.is_available() else "cpu"
#: Output tolerances (atol = rtol) vs float64 SDPA: one rounding of the output plus P rounded to the input
#: dtype before P @ V (FlashAttention's practice): bf16 2^-8 / fp16 2^-11 relative per element.
TOL = {torch.bfloat16: 2e-2, torch.float16: 3e-3, torch.float32: 2e-5}


def _kernels():
    from rocm_inductor.providers.triton import attention

    return attention


def sdpa64(q, k, v, mask, scale):
    """float64 SDPA over K/V repeated to every query head (HF ``repeat_kv``'s mapping)."""
    g = q.shape[1] // k.shape[1]
    kk = k.double().repeat_interleave(g, dim=1)
    vv = v.double().repeat_interleave(g, dim=1)
    m = mask if mask is None or mask.dtype == torch.bool else mask.double()
    out = F.scaled_dot_product_attention(q.double(), kk, vv, attn_mask=m, scale=scale)
    if m is not None:  # rows with nothing kept -> 0 (SDPA's _safe_softmax on torch >= 2.5; be explicit here)
        keep = m if m.dtype == torch.bool else m > float("-inf")
        keep = keep.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2]).any(-1, keepdim=True)
        out = torch.where(keep, out, torch.zeros_like(out))
    return out


def make(b, hq, hkv, lq, lkv, d, dv=None, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    dv = dv or d
    q = torch.randn(b, hq, lq, d, generator=gen).to(dtype).to(DEV)
    k = torch.randn(b, hkv, lkv, d, generator=gen).to(dtype).to(DEV)
    v = torch.randn(b, hkv, lkv, dv, generator=gen).to(dtype).to(DEV)
    return q, k, v


def causal_from_position(pos, lq, lkv):
    """(B, 1, Lq, Lkv) bool: query i of row b sits at position pos[b] + i and sees slots <= it (HF's mask)."""
    qpos = torch.as_tensor(pos)[:, None] + torch.arange(lq)[None, :]
    return (torch.arange(lkv)[None, None, :] <= qpos[:, :, None])[:, None].to(DEV)


def run(q, k, v, mask, scale=None, **kw):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = _kernels().decode_attention(q, k, v, mask, scale, **kw)
    return out, scale


def assert_close(out, q, k, v, mask, scale):
    exp = sdpa64(q, k, v, mask, scale)
    tol = TOL[q.dtype]
    assert out.shape == exp.shape and out.dtype == q.dtype and out.is_contiguous()
    torch.testing.assert_close(out.double(), exp, atol=tol, rtol=tol)
    ref = decode_attention_ref(q, k, v, mask, scale)
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype,d,dv", [(torch.bfloat16, 64, 64), (torch.float16, 128, 128),
                                        (torch.float32, 256, 256), (torch.bfloat16, 80, 48)])
def test_dtypes_head_dims(dtype, d, dv):
    q, k, v = make(2, 4, 2, 1, 40, d, dv, dtype)
    mask = causal_from_position([17, 39], 1, 40)
    out, scale = run(q, k, v, mask, block_n=32)
    assert_close(out, q, k, v, mask, scale)


@pytest.mark.parametrize("hq,hkv,lq", [(4, 4, 1), (4, 2, 3), (8, 2, 1), (8, 1, 2), (16, 2, 5), (4, 1, 32)])
def test_gqa_ratios_and_query_lengths(hq, hkv, lq):
    q, k, v = make(2, hq, hkv, lq, 48, 32)
    mask = causal_from_position([5, 47 - lq + 1], lq, 48)
    out, scale = run(q, k, v, mask, block_n=16)
    assert_close(out, q, k, v, mask, scale)


def test_splits_forced_and_deterministic():
    q, k, v = make(2, 8, 2, 2, 100, 64)
    mask = causal_from_position([30, 97], 2, 100)
    out, scale = run(q, k, v, mask, num_splits=4, block_n=16)
    assert_close(out, q, k, v, mask, scale)
    again, _ = run(q, k, v, mask, num_splits=4, block_n=16)
    assert torch.equal(out, again)
    one, _ = run(q, k, v, mask, num_splits=1, block_n=16)
    torch.testing.assert_close(one.float(), out.float(), atol=TOL[q.dtype], rtol=TOL[q.dtype])


def test_masks_left_padding_sliding_window_additive():
    b, lq, lkv = 3, 2, 64
    q, k, v = make(b, 4, 2, lq, lkv, 32, dtype=torch.float16)
    pos = torch.tensor([20, 40, 62])
    causal = causal_from_position(pos, lq, lkv)
    # Left padding (batched generate, prompts of different lengths): row b's first pad[b] slots are padding.
    pad = torch.tensor([0, 7, 33])
    leftpad = causal & (torch.arange(lkv)[None, :] >= pad[:, None])[:, None, None, :].to(DEV)
    qpos = pos[:, None] + torch.arange(lq)[None, :]
    window = (torch.arange(lkv)[None, None, :] > qpos[:, :, None] - 16)[:, None].to(DEV) & causal
    for mask in (leftpad, window):
        out, scale = run(q, k, v, mask, num_splits=2, block_n=16)
        assert_close(out, q, k, v, mask, scale)
        for mdt in (torch.float16, torch.float32):  # additive masks in q's dtype and in float32
            add = torch.zeros(mask.shape, dtype=mdt, device=DEV).masked_fill(~mask, float("-inf"))
            out_add, _ = run(q, k, v, add, num_splits=2, block_n=16)
            torch.testing.assert_close(out_add, out)


@pytest.mark.filterwarnings("ignore:overflow encountered")  # finfo.min * log2(e) -> -inf (intended)
def test_additive_finite_and_per_head_mask():
    q, k, v = make(2, 4, 2, 3, 40, 32, dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    add = torch.randn(2, 4, 3, 40, generator=gen).to(DEV)  # a full (B, Hq, Lq, L) bias, no -inf
    out, scale = run(q, k, v, add, block_n=16, num_splits=2)
    assert_close(out, q, k, v, add, scale)
    # HF's finfo.min spelling of "removed": never skipped, but equal to SDPA (a row with only such entries
    # averages them, as SDPA does).
    keep = causal_from_position([3, 20], 3, 40).expand(2, 4, 3, 40).clone()
    keep[1, 2, 1] = False
    fmin = torch.zeros(keep.shape, device=DEV).masked_fill(~keep, torch.finfo(torch.float32).min)
    out, scale = run(q, k, v, fmin, block_n=16)
    assert_close(out, q, k, v, fmin, scale)


def test_removed_rows_and_empty_batch():
    q, k, v = make(2, 4, 1, 2, 40, 32)
    mask = causal_from_position([10, 30], 2, 40).expand(2, 4, 2, 40).clone()
    mask[0, 1, 0] = False  # one (head, position) row removed entirely
    mask[1] = False  # a whole batch row removed
    out, scale = run(q, k, v, mask, num_splits=3, block_n=16)
    assert_close(out, q, k, v, mask, scale)
    assert out[0, 1, 0].abs().max() == 0 and out[1].abs().max() == 0
    add = torch.zeros(mask.shape, device=DEV).masked_fill(~mask, float("-inf"))
    out_add, _ = run(q, k, v, add, block_n=16)
    torch.testing.assert_close(out_add, out, atol=TOL[q.dtype], rtol=TOL[q.dtype])
    e = _kernels().decode_attention(q[:0], k[:0], v[:0], mask[:0], 0.1)
    assert e.shape == (0, 4, 2, 32)
    op = torch.ops.rocm_fused.decode_attention(q[:0], k[:0], v[:0], mask[:0], 0.1, "triton")
    assert op.shape == (0, 4, 2, 32)


def test_removed_blocks_are_not_read():
    """K/V slots no row keeps are NaN: a kernel that loaded them (and multiplied by p = 0) would return NaN."""
    q, k, v = make(2, 8, 2, 1, 128, 32)
    mask = causal_from_position([40, 70], 1, 128)
    clean, scale = run(q, k, v, mask, block_n=32, num_splits=2)
    removed = ~mask[:, 0, 0, :]  # (B, L): whole blocks 64..127 / 96..127, and slots inside kept blocks
    kn, vn = k.clone(), v.clone()
    kn[removed[:, None, :, None].expand_as(kn)] = float("nan")
    vn[removed[:, None, :, None].expand_as(vn)] = float("nan")
    for ns in (1, 2):
        out, _ = run(q, kn, vn, mask, block_n=32, num_splits=ns)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.float(), clean.float(), atol=TOL[q.dtype], rtol=TOL[q.dtype])
    assert_close(clean, q, k, v, mask, scale)


def test_no_mask_strided_q_and_op():
    # q as HF makes it: (B, L, H, D) projection viewed as (B, H, L, D) (non-contiguous, last dim contiguous)
    b, hq, hkv, lq, lkv, d = 2, 4, 2, 3, 24, 32
    q = torch.randn(b, lq, hq, d, device=DEV).to(torch.bfloat16).transpose(1, 2)
    _, k, v = make(b, hq, hkv, lq, lkv, d)
    out, scale = run(q, k, v, None, block_n=16)
    assert_close(out, q, k, v, None, scale)
    mask = causal_from_position([4, 20], lq, lkv)
    got = torch.ops.rocm_fused.decode_attention(q, k, v, mask, 0.3, "triton")
    ref = torch.ops.rocm_fused.decode_attention(q, k, v, mask, 0.3, "reference")
    torch.testing.assert_close(got.float(), ref.float(), atol=TOL[q.dtype], rtol=TOL[q.dtype])


def test_launch_config_and_check():
    A = _kernels()
    cfg = A.launch_config(1, 8, 1, 1024, 4, 64, 64, sms=132, rocm=False)
    assert cfg["NSPLIT"] > 1 and cfg["BLOCK_M"] == 16 and cfg["SPLIT_LEN"] % cfg["BLOCK_N"] == 0
    assert cfg["NSPLIT"] * cfg["SPLIT_LEN"] >= 1024 > (cfg["NSPLIT"] - 1) * cfg["SPLIT_LEN"]
    # The H200 picks the results table quotes (benchmarks/results/runs/attention_layer.csv): (B, Hkv, g, D, L) ->
    # (splits, BLOCK_N).
    picks = {(1, 8, 4, 64, 1024): (8, 128), (8, 8, 4, 64, 1024): (8, 128), (32, 8, 4, 64, 1024): (4, 128),
             (1, 8, 4, 64, 4096): (32, 128), (8, 8, 4, 64, 4096): (16, 128), (32, 1, 8, 256, 1024): (8, 64),
             (1, 1, 8, 256, 4096): (32, 128)}
    for (b, hkv, g, d, lkv), want in picks.items():
        c = A.launch_config(b, hkv, 1, lkv, g, d, d, sms=132, rocm=False)
        assert (c["NSPLIT"], c["BLOCK_N"]) == want, (b, hkv, g, d, lkv)
    assert A.launch_config(1, 1, 1, 4096, 8, 256, 256, sms=304, rocm=True)["BLOCK_N"] == 64  # gfx942 LDS
    for b, hkv, g, lq, d in ((1, 8, 4, 1, 64), (32, 8, 4, 1, 64), (8, 1, 8, 1, 256), (4, 8, 2, 32, 128)):
        c = A.launch_config(b, hkv, lq, 4096, g, d, d, sms=304, rocm=True)  # MI300X: 304 CUs
        assert c["num_warps"] * 64 <= 1024 and c["NSPLIT"] <= A.MAX_SPLITS and c["BLOCK_M"] >= 16
    from rocm_inductor.ops.attention import attention_spec

    q, k, v = make(1, 4, 2, 1, 16, 64)
    mask = causal_from_position([3], 1, 16)
    spec = attention_spec(q, k, v, mask)
    assert A.check(spec) is None
    assert "float16/bfloat16/float32" in A.check({**spec, "dtype": torch.float64})
    assert "outside" in A.check({**spec, "head_dim": 512})
    assert "symbolic" in A.check({**spec, "v_head_dim": None})
    assert "prefill" in A.check({**spec, "q_len": 512})
    assert "last dim" in A.check({**spec, "last_dim_contiguous": False})
    assert "mask dtype" in A.check({**spec, "mask_kind": "additive", "mask_dtype": torch.float64})
    from rocm_inductor.providers.triton import TritonProvider

    assert "decode_attention" in TritonProvider.ops
    assert TritonProvider().check("decode_attention", {**spec, "head_dim": 512}) is not None


def test_aot_cases_shape():
    for c in _kernels().aot_cases():
        assert {"name", "fn", "signature", "constexprs", "num_warps"} <= set(c)
        assert set(c) <= {"name", "fn", "signature", "constexprs", "num_warps", "attrs", "known_spill"}
        assert set(c["constexprs"]) <= set(c["signature"]) and c["num_warps"] * 64 <= 1024
        assert list(c["signature"]) == list(c["fn"].arg_names)


# ---- GPU ---------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("b", [1, 8, 32])
@pytest.mark.parametrize("lkv", [1024, 4096])
@pytest.mark.parametrize("hq,hkv,d", [(32, 8, 64), (16, 8, 128), (8, 1, 256)])
def test_gpu_shapes(b, lkv, hq, hkv, d):
    q, k, v = make(b, hq, hkv, 1, lkv, d)
    pos = torch.randint(0, lkv, (b,), generator=torch.Generator().manual_seed(b))
    pos[0] = 512
    mask = causal_from_position(pos, 1, lkv)
    out, scale = run(q, k, v, mask)
    ref = decode_attention_ref(q, k, v, mask, scale)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_gpu_cuda_graph_replay_with_changed_mask():
    b, lkv = 8, 1024
    q, k, v = make(b, 32, 8, 1, lkv, 64)
    mask = causal_from_position(torch.full((b,), 512), 1, lkv).clone()
    scale = 0.125

    def step():
        return torch.ops.rocm_fused.decode_attention(q, k, v, mask, scale, "triton")

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    for p in (512, 3, 1000):
        new = causal_from_position(torch.arange(b) * 7 + p, 1, lkv)
        mask.copy_(new)
        q.normal_()
        g.replay()
        torch.cuda.synchronize()
        ref = decode_attention_ref(q, k, v, mask, scale)
        torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)


def test_bench_anchors_agree_on_cpu():
    """The benchmark's HF attention (repeat_kv + SDPA) and packed SDPA compute the same thing (tiny, CPU)."""
    from bench_utils import load_bench

    bench = load_bench("ops/bench_attention.py")
    q, k, v = make(2, 8, 2, 1, 20, 16, dtype=torch.float32)
    mask = causal_from_position([5, 19], 1, 20)
    a = bench.hf_attention(q, k, v, mask, 0.25, 4)
    torch.testing.assert_close(bench.sdpa_packed(q, k, v, mask, 0.25), a)
    torch.testing.assert_close(a.double(), sdpa64(q, k, v, mask, 0.25), atol=1e-5, rtol=1e-5)


def test_bench_rebase_reads_the_current_pick():
    """``--from-sweep``: the table's ours_us is the sweep time of what launch_config picks now."""
    from bench_utils import load_bench

    bench = load_bench("ops/bench_attention.py")
    row = {"model": "llama-3.2-1b", "max_cache_len": "1024", "batch": "1", "inductor_us": "15.0",
           "sdpa_packed_us": "24.0", "flex_us": "", "ours_us": "6.5", "floor_us": "0.25", "best_sweep_us": "5.0",
           "best_sweep_cfg": "32 splits bn32", "note": ""}
    sweep = [{"model": "llama-3.2-1b", "max_cache_len": "1024", "batch": "1", "block_n": str(bn),
              "num_splits": str(ns), "us": str(us), "note": ""} for bn, ns, us in ((128, 8, 5.5), (64, 8, 6.6))]
    (got,) = bench.rebase([row], sweep, sms=132)
    assert got["ours_us"] == 5.5 and got["ours_cfg"] == "8 splits bn128" and got["ours_run_us"] == "6.5"
    assert got["inductor_x_ours"] == round(15.0 / 5.5, 2) and got["flex_x_ours"] == ""
    (miss,) = bench.rebase([row], sweep[1:], sms=132)
    assert miss["ours_us"] == "" and "not swept" in miss["note"]


def test_max_splits_combine():
    """MAX_SPLITS (64) partials merged by the combine kernel (the largest BLOCK_S it compiles)."""
    A = _kernels()
    q, k, v = make(1, 2, 1, 1, 64 * 16, 16, dtype=torch.float32)
    mask = causal_from_position([700], 1, 64 * 16)
    out, scale = run(q, k, v, mask, num_splits=A.MAX_SPLITS, block_n=16)
    assert A.launch_config(1, 1, 1, 64 * 16, 2, 16, 16, 1, A.MAX_SPLITS, 16)["NSPLIT"] == A.MAX_SPLITS
    assert_close(out, q, k, v, mask, scale)
