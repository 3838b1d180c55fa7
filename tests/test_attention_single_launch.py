"""Decode attention in one launch (the last split program merges the partials) and the positions form of
``rocm_fused::decode_attention`` (the causal / sliding-window mask computed from the query positions), against the
two-launch form, the reference and a mask tensor; the kernel configs read from the tuning store (op
``decode_attention``). CPU tests run the kernels under ``TRITON_INTERPRET=1`` on tiny shapes; GPU tests replay
CUDA graphs (the counters must be back to zero after every launch)."""

from __future__ import annotations

import pytest
import torch

from rocm_inductor.providers.reference_attention import decode_attention_ref

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _tri():
    from rocm_inductor.providers.triton import attention

    return attention


def make(b, hq, hkv, lq, lkv, d, dtype=torch.bfloat16, seed=0, device=DEV):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*s, generator=gen).to(dtype).to(device)
               for s in ((b, hq, lq, d), (b, hkv, lkv, d), (b, hkv, lkv, d)))
    return q, k, v


def pos_mask(pos: torch.Tensor, lkv: int, window: int = 0) -> torch.Tensor:
    """(B, 1, Lq, Lkv) bool from (B, Lq) positions: slot j kept iff j <= p (and j > p - window)."""
    j = torch.arange(lkv, device=pos.device)
    keep = j <= pos[:, :, None]
    if window:
        keep = keep & (j > pos[:, :, None] - window)
    return keep[:, None]


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("ROCM_FUSED_ATTN_ONE_LAUNCH", raising=False)


def test_one_launch_is_the_two_launch_result_and_resets_its_counters(no_env):
    A = _tri()
    q, k, v = make(2, 4, 2, 1, 64, 32)
    mask = pos_mask(torch.tensor([[40], [0]], device=DEV), 64)
    mask[1] = False  # a fully masked batch row: zeros, as eager's safe softmax
    two = A.decode_attention(q, k, v, mask, 0.2, num_splits=4, block_n=16, inline_combine=False)
    one = A.decode_attention(q, k, v, mask, 0.2, num_splits=4, block_n=16, inline_combine=True)
    assert torch.equal(one, two)  # the same fixed-order merge, whichever program runs it
    assert int(A._COUNTERS[str(q.device)].abs().sum()) == 0
    torch.testing.assert_close(one.float(), decode_attention_ref(q, k, v, mask, 0.2).float(), atol=2e-2, rtol=2e-2)
    assert torch.all(one[1] == 0)


def test_one_launch_with_sinks_matches_the_reference(no_env):
    A = _tri()
    q, k, v = make(1, 4, 2, 1, 96, 16, dtype=torch.float32)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], device=DEV)
    mask = pos_mask(torch.tensor([[50]], device=DEV), 96)
    got = A.decode_attention(q, k, v, mask, 0.3, num_splits=3, block_n=16, sinks=sinks, inline_combine=True)
    torch.testing.assert_close(got, decode_attention_ref(q, k, v, mask, 0.3, sinks), atol=2e-5, rtol=2e-5)


def test_positions_and_window_equal_the_mask(no_env):
    A = _tri()
    q, k, v = make(2, 4, 2, 2, 96, 32)
    pos = torch.tensor([[70, 71], [5, 6]], device=DEV)  # (B, Lq): per-row positions of a 2-token query
    for window in (0, 40):
        mask = pos_mask(pos, 96, window)
        want = decode_attention_ref(q, k, v, mask, 0.2)
        assert torch.equal(decode_attention_ref(q, k, v, None, 0.2, positions=pos, window=window), want)
        got = A.decode_attention(q, k, v, None, 0.2, num_splits=3, block_n=32, positions=pos, window=window,
                                 inline_combine=window > 0)
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)
    # through the op, positions broadcast over the batch ((1, 1): HF's cache_position of one decoded token)
    q1, k1, v1 = q[:, :, :1], k, v
    p1 = torch.tensor([[33]], device=DEV)
    got = torch.ops.rocm_fused.decode_attention(q1, k1, v1, None, 0.2, "triton", positions=p1)
    ref = torch.ops.rocm_fused.decode_attention(q1, k1, v1, pos_mask(p1.expand(2, 1), 96), 0.2, "reference")
    torch.testing.assert_close(got.float(), ref.float(), atol=2e-2, rtol=2e-2)


def test_mask_without_block_skip_is_the_same_result(no_env):
    """``skip: False`` (loads predicated on the kept slots, no per-block branch) changes no value."""
    A = _tri()
    q, k, v = make(1, 4, 1, 1, 128, 16, dtype=torch.float32)
    mask = torch.zeros(1, 1, 1, 128, dtype=torch.bool, device=DEV)
    mask[..., 3:20] = True  # blocks 2-3 of 4 nothing kept: skipped or not, they add nothing
    a = A.decode_attention(q, k, v, mask, 0.2, config={"num_splits": 2, "block_n": 32, "skip": True})
    b = A.decode_attention(q, k, v, mask, 0.2, config={"num_splits": 2, "block_n": 32, "skip": False})
    assert torch.equal(a, b)


def test_positions_validation_and_spec():
    from rocm_inductor.ops.attention import attention_spec

    q, k, v = make(2, 4, 2, 1, 16, 16, device="cpu")
    op = torch.ops.rocm_fused.decode_attention
    for bad, what in ((torch.zeros(3, 1, dtype=torch.long), "positions must be"),
                      (torch.zeros(2, dtype=torch.long), "positions must be"),
                      (torch.zeros(2, 1), "int32/int64")):
        with pytest.raises(ValueError, match=what):
            op(q, k, v, None, 0.1, "reference", positions=bad)
    with pytest.raises(ValueError, match="needs positions"):
        op(q, k, v, None, 0.1, "reference", window=4)
    pos = torch.zeros(2, 1, dtype=torch.int32)
    spec = attention_spec(q, k, v, None, positions=pos, window=8)
    assert spec["positions_dtype"] == torch.int32 and spec["window"] == 8
    assert _tri().check(spec) is None
    assert "int32/int64" in _tri().check({**spec, "positions_dtype": torch.float32})


def test_configs_come_from_the_tuning_store():
    from rocm_inductor.tuning import device as tuning_device

    A = _tri()
    h200 = tuning_device.DeviceKey("NVIDIA H200", "sm_90", 132, "x", "x")
    with tuning_device.override(h200):
        cfg, src = A.stored_config(torch.bfloat16, 32, 8, 1, 64, 64, 1, 1024)
        assert src.startswith("shipped:NVIDIA H200") and "batch=1," in src and set(cfg) <= set(A.CONFIG_KEYS)
        # nearest measured batch >= ours (B = 4 -> the B = 8 entry), and cache length (2048 -> 4096)
        assert "batch=8," in A.stored_config(torch.bfloat16, 32, 8, 1, 64, 64, 4, 2048)[1]
        assert "kv_len=4096" in A.stored_config(torch.bfloat16, 32, 8, 1, 64, 64, 4, 2048)[1]
        assert A.stored_config(torch.float16, 32, 8, 1, 64, 64, 1, 1024) is None  # not measured
        picked = A.pick(1, 32, 8, 1, 1024, 64, 64, torch.bfloat16, 132)
        assert (picked["NSPLIT"], picked["BLOCK_N"]) == (cfg["num_splits"], cfg["block_n"])
        assert picked["source"] == src
        assert A.pick(1, 32, 8, 1, 1024, 64, 64, torch.bfloat16, 132, num_splits=2)["NSPLIT"] == 2
    assert A.stored_config(torch.bfloat16, 32, 8, 1, 64, 64, 1, 1024) is None  # CPU key: no GPU's entries
    assert A.pick(1, 32, 8, 1, 1024, 64, 64, torch.bfloat16, 132)["source"] == "heuristic"


def test_sweep_rows_become_store_decisions():
    """``tuning.tables.attention_decisions``: the fastest point per shape, its one-launch / skip / stages columns
    into the config; the shipped H200 entries are the committed sweep's (``scripts/convert_tuned_tables.py``)."""
    import json

    from rocm_inductor.tuning import tables
    from rocm_inductor.tuning.store import SHIPPED_DIR

    base = {"run_id": "r", "model": "llama-3.2-1b", "batch": "8", "max_cache_len": "1024", "block_n": "128"}
    rows = [dict(base, num_splits="4", us="9.0"), dict(base, num_splits="4", us="7.5", one_launch="1", skip="0",
                                                        num_stages="2"), dict(base, num_splits="8", us="8.0")]
    (d,) = tables.attention_decisions(rows, "shipped:X", "r")
    assert d.config == {"num_splits": 4, "block_n": 128, "one_launch": True, "skip": False, "num_stages": 2}
    assert d.signature == tables.attention_signature("bfloat16", 32, 8, 1, 64, 64, 8, 1024)
    assert list(d.times_us) == ["triton", "triton:8x128", "triton:4x128"]
    shipped = json.loads((SHIPPED_DIR / "nvidia_h200.json").read_text())["entries"]
    attn = [e for e in shipped if e["op"] == tables.ATTN_OP]
    assert len(attn) == 18 and all(e["winner"] == "triton" and "attention_sweep.csv" in e["evidence"] for e in attn)


def test_one_launch_switch(monkeypatch):
    A = _tri()
    monkeypatch.delenv(A.ONE_LAUNCH_ENV, raising=False)
    assert A.one_launch_wanted(None) is A.config.ONE_LAUNCH_DEFAULT
    assert A.one_launch_wanted(True) and not A.one_launch_wanted(False)
    monkeypatch.setenv(A.ONE_LAUNCH_ENV, "0")
    assert not A.one_launch_wanted(True) and A.one_launch_wanted(True, override=True)
    monkeypatch.setenv(A.ONE_LAUNCH_ENV, "1")
    assert A.one_launch_wanted(False) and not A.one_launch_wanted(None, override=False)


def test_counters_fall_back_where_one_launch_is_unsafe():
    A = _tri()
    assert A._counters(torch.device("cpu"), A.MAX_COUNTERS + 1) is None  # more tiles than counters
    buf = A._counters(torch.device("cpu"), 8)
    assert buf is not None and buf.dtype == torch.int32 and buf.numel() == A.MAX_COUNTERS
    assert A._counters(torch.device("cpu"), 8) is buf  # one buffer per device, kept for captured graphs


def test_provider_check_reserves_the_counters_only_for_a_gpu(monkeypatch):
    from rocm_inductor.ops.attention import attention_spec
    from rocm_inductor.providers import get_provider

    A = _tri()
    seen = []
    monkeypatch.setattr(A, "reserve_counters", seen.append)
    q, k, v = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 32, 16), torch.randn(1, 2, 32, 16)
    spec = attention_spec(q, k, v, None)
    assert spec["device"] == torch.device("cpu")
    assert get_provider("triton").check("decode_attention", spec) is None and seen == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu = {**spec, "device": torch.device("cuda", 0)}
    assert get_provider("triton").check("decode_attention", gpu) is None and seen == [torch.device("cuda", 0)]


def test_aot_cases_cover_one_launch_and_positions():
    names = {c["name"]: c for c in _tri().aot_cases()}
    one = names["decode_attention_llama_b1_one_launch"]["constexprs"]
    assert one["INLINE_COMBINE"] and one["WRITE_PARTIAL"]
    pos = names["decode_attention_llama_positions_window_b32"]["constexprs"]
    assert pos["HAS_POS"] and pos["HAS_WINDOW"] and not pos["HAS_MASK"] and not pos["SKIP"]
    assert not names["decode_attention_llama_b1"]["constexprs"]["INLINE_COMBINE"]


def _hf_like(q, k, v, cache_position, attention_mask, window: int = 0):
    """transformers 5's decode mask over a static cache (``sdpa_mask``: a causal term from ``iota +
    cache_position`` and the padding term from ``attention_mask``, and-ed), then SDPA over repeated K/V."""
    lkv = k.shape[2]
    kv = torch.arange(lkv)[None, None, None, :]
    qpos = (torch.arange(q.shape[2]) + cache_position[0])[None, None, :, None]
    causal = kv <= qpos
    if window:
        causal = causal & (kv > qpos - window)
    mask = torch.full((), True) & causal & attention_mask[:, None, None, :].bool()
    g = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)


def test_positions_switch_is_in_the_cache_key(monkeypatch):
    """``ROCM_FUSED_ATTN_POSITIONS=0`` keeps masks as they are, and a compile under it has another cache key."""
    from rocm_inductor.options import parse_options
    from rocm_inductor.passes.attention import positions
    from rocm_inductor.passes.attention.masks import MaskSource
    from rocm_inductor.passes.manager import PassManager

    monkeypatch.delenv(positions.ENV, raising=False)
    on = PassManager(parse_options(None)).uuid()
    monkeypatch.setenv(positions.ENV, "0")
    assert PassManager(parse_options(None)).uuid() != on
    assert positions.causal_positions(MaskSource(None, "bool"), 1, 16) is None


@pytest.mark.slow
def test_pass_turns_the_causal_mask_into_positions():
    """The attention pass hands the op the query positions for the causal and sliding terms (checked at compile
    time on random positions) and keeps the padding term as the mask; the result is eager's. (One compile; the
    tiny HF models of test_attention_models.py take the causal-only form.)"""
    from graph_utils import compile_run

    q, k, v = make(2, 4, 2, 1, 32, 16, dtype=torch.float32, device="cpu")
    pos = torch.tensor([20])
    pad = torch.ones(2, 32, dtype=torch.long)
    pad[1, :3] = 0  # left padding of the second sequence
    out, seen = compile_run(_hf_like, q, k, v, pos, pad, 8)
    torch.testing.assert_close(out, _hf_like(q, k, v, pos, pad, 8), atol=1e-5, rtol=1e-5)
    (m,) = [m for c in seen for m in c.report.matches if m.op == "decode_attention"]
    assert "positions from" in m.note and "window 8" in m.note, m.note


# ------------------------------------------------------------------------------------------------------ GPU

def _replay(fn, times: int = 3):
    """Capture ``fn`` in a CUDA graph (after a warm-up) and replay it ``times`` times; the last output."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    for _ in range(times):
        g.replay()
    torch.cuda.synchronize()
    return out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("b,lkv", [(1, 1024), (8, 1024), (32, 4096)])
def test_gpu_one_launch_in_cuda_graphs(b, lkv, no_env):
    """Llama-3.2-1B heads: one launch == two launches (within one bf16 rounding: the kernels' reduction layouts
    may differ), the same bits over graph replays; the counters stay 0."""
    A = _tri()
    q, k, v = make(b, 32, 8, 1, lkv, 64)
    mask = pos_mask(torch.full((b, 1), lkv // 2, device="cuda"), lkv)
    two = A.decode_attention(q, k, v, mask, 0.125, num_splits=8, inline_combine=False)
    one = A.decode_attention(q, k, v, mask, 0.125, num_splits=8, inline_combine=True)
    torch.testing.assert_close(one.float(), two.float(), atol=1e-2, rtol=1e-2)
    for _ in range(3):
        out = _replay(lambda: A.decode_attention(q, k, v, mask, 0.125, num_splits=8, inline_combine=True), 5)
        assert torch.equal(out, one)
    assert int(A._COUNTERS[str(q.device)].abs().sum()) == 0
    torch.testing.assert_close(one.float(), decode_attention_ref(q, k, v, mask, 0.125).float(), atol=2e-2,
                               rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_positions_window_and_sinks(no_env):
    """Positions (+ window, + sinks) in one launch against the mask form and the reference, GPT-OSS-like heads."""
    A = _tri()
    q, k, v = make(8, 64, 8, 1, 1024, 64)
    pos = torch.randint(0, 1024, (8, 1), device="cuda")
    sinks = torch.randn(64, device="cuda")
    for window, sk in ((0, None), (128, None), (128, sinks)):
        mask = pos_mask(pos, 1024, window)
        want = decode_attention_ref(q, k, v, mask, 0.125, sk)
        for one in (False, True):
            got = _replay(lambda one=one, sk=sk, window=window: A.decode_attention(
                q, k, v, None, 0.125, sinks=sk, positions=pos, window=window, inline_combine=one, num_splits=4))
            torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_one_launch_under_cudagraph_trees_from_a_fresh_process(monkeypatch):
    """The first one-launch compile of a process under cudagraph trees: the counters must not be allocated by the
    warmup launch (it runs in the graph's pool: "Detected 1 tensor(s) in the cudagraph pool not tracked as
    outputs", seen on the H100 in benchmarks/e2e/decode_step.py's Llama one_launch config)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    A = _tri()
    monkeypatch.setenv(A.ONE_LAUNCH_ENV, "1")
    monkeypatch.setattr(A, "_COUNTERS", {})
    q, k, v = (torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in ((2, 8, 1, 64), (2, 2, 4096, 64),
                                                                             (2, 2, 4096, 64)))

    def attn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    torch._dynamo.reset()
    fn = torch.compile(attn, backend="rocm_fused", options={"cudagraphs": True, "providers": {"attention": "triton"}})
    want = attn(q, k, v).float()
    for _ in range(3):
        torch.compiler.cudagraph_mark_step_begin()
        got = fn(q, k, v).float()
    assert (got - want).abs().max() < 2e-2
    assert str(q.device) in A._COUNTERS and int(A._COUNTERS[str(q.device)].abs().sum()) == 0
