"""``rocm_fused::rms_norm_gemm`` (issue 19): the op, its Triton RMSNorm prologue (interpreter) and the fold pass.

The prologue path is forced with a full-K GEMV config (the decode M = 1-2 tile); the default config on CPU is a
dot tile, which takes the two-launch path (norm kernel, then merged GEMM). Numerics: the residual sum bitwise,
the GEMM outputs within the numerics contract (docs/ops.md) of the unfolded reference (norm then GEMMs).
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import assert_contract, compile_run

from rocm_inductor.providers.reference import rms_norm_gemm_ref

FOLD = "rocm_fused.rms_norm_gemm.default"
MERGED = "rocm_fused.merged_gemm.default"
OPTS = {"passes": {"gemm_merge": True, "norm_gemm": True}}


def _full_k(m: int, k: int, block_n: int = 4):
    """The full-K GEMV tile of the one-launch path: BLOCK_M the next power of two >= M, BLOCK_K the next >= K."""
    from rocm_inductor.providers.triton import gemm_merge as gm

    return gm.Config(1 << max(m - 1, 0).bit_length(), block_n, 1 << (k - 1).bit_length(), 1, 4, 1, False, False,
                     True, True)


def _inputs(m, k, ns, dtype, residual=True, weight=True, bias=False, seed=0, scale=0.05):
    """x, residual (or None), norm weight (or None), weights (N_i, K) x ``scale``, biases on every other weight."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype)
    r = torch.randn(m, k, generator=g).to(dtype) if residual else None
    gw = (torch.rand(k, generator=g) + 0.5).to(dtype) if weight else None
    ws = [(torch.randn(n, k, generator=g) * scale).to(dtype) for n in ns]
    bs = [torch.randn(n, generator=g).to(dtype) if bias and i % 2 == 0 else None for i, n in enumerate(ns)]
    return x, r, gw, ws, bs


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m,k,ns,residual,weight,bias,offset", [
    (1, 128, (40, 8, 8), True, True, False, 0.0),   # q/k/v-like, N not a multiple of BLOCK_N
    (2, 96, (24, 24), False, True, True, 1.0),      # masked K (96 -> 128), Gemma's offset, biases
    (1, 64, (17,), True, False, False, 0.0),        # a single GEMM (lm_head-like), weightless norm
])
def test_prologue_matches_the_unfolded_reference(dtype, m, k, ns, residual, weight, bias, offset):
    from rocm_inductor.providers.triton import norm_gemm as ng

    x, r, gw, ws, bs = _inputs(m, k, ns, dtype, residual, weight, bias)
    outs = ng.rms_norm_gemm(x, r, gw, 1e-6, offset, ws, bs, config=_full_k(m, k))
    eager = rms_norm_gemm_ref(x, r, gw, 1e-6, offset, ws, bs)
    ref64 = rms_norm_gemm_ref(x.double(), None if r is None else r.double(), None if gw is None else gw.double(),
                              1e-6, offset, [w.double() for w in ws], [None if b is None else b.double() for b in bs])
    assert len(outs) == len(ns) + residual
    for o, e, f in zip(outs[:len(ns)], eager, ref64, strict=False):
        assert_contract(o, e, f)
    if residual:
        assert torch.equal(outs[-1], eager[-1])


def test_dot_tile_prologue_at_m_2_to_32():
    """The dot tile's prologue (M 2..32, bf16 / fp32, no K split): one launch (the GEMM's split pick is run
    without the split), the sum bitwise, the outputs within the contract of the unfolded reference; fp16 and a
    K split keep the two launches."""
    from rocm_inductor.providers.triton import gemm_merge as gm
    from rocm_inductor.providers.triton import norm_gemm as ng

    split = gm.Config(16, 16, 32, 2, 4, 3, True)
    assert ng.fold_config(split, 4, 64, torch.bfloat16) == gm.Config(16, 16, 32, 1, 4, 3, True)
    assert ng.fold_config(split, 4, 64, torch.float16) == split  # fp16: s * g may overflow before the rstd
    assert ng.fold_config(_full_k(1, 64), 1, 64, torch.bfloat16) == _full_k(1, 64)
    gemv_split = gm.Config(4, 8, 64, 2, 4, 3, False, True)
    assert ng.fold_config(gemv_split, 4, 96, torch.float32).dot
    for dtype, m, k, ns, residual, weight, offset in [
        (torch.bfloat16, 4, 96, (40, 24), True, True, 0.0),    # masked K, gate/up-like
        (torch.float32, 20, 64, (24,), False, True, 1.0),      # BLOCK_M 32, Gemma's offset
        (torch.bfloat16, 3, 64, (16, 8, 8), True, False, 0.0),  # q/k/v-like, weightless norm
    ]:
        x, r, gw, ws, bs = _inputs(m, k, ns, dtype, residual, weight)
        cfg = ng.fold_config(gm.default_config(m, ns, k, dtype), m, k, dtype)
        assert ng.one_launch(cfg, m, k, dtype) and cfg.dot
        outs = ng.rms_norm_gemm(x, r, gw, 1e-6, offset, ws, bs)
        eager = rms_norm_gemm_ref(x, r, gw, 1e-6, offset, ws, bs)
        ref64 = rms_norm_gemm_ref(x.double(), None if r is None else r.double(),
                                  None if gw is None else gw.double(), 1e-6, offset, [w.double() for w in ws], bs)
        for o, e, f in zip(outs[:len(ns)], eager, ref64, strict=False):
            assert_contract(o, e, f)
        if residual:
            assert torch.equal(outs[-1], eager[-1])


def test_two_launch_path_and_3d_input():
    """A config without the prologue (a split-K dot tile) runs norm then GEMM: the reference's bits for
    the sum, (..., K) inputs flattened to M rows, ``s`` in x's shape."""
    from rocm_inductor.providers.triton import gemm_merge as gm
    from rocm_inductor.providers.triton import norm_gemm as ng

    x, r, gw, ws, bs = _inputs(6, 32, (16, 8), torch.float32)
    x3, r3 = x.view(2, 3, 32), r.view(2, 3, 32)
    assert not gm.prologue_fits(gm.default_config(6, (16, 8), 32, torch.float32), 32)
    split = gm.Config(16, 16, 16, 2, 4, 3, True)  # a K split: neither prologue runs it
    assert not ng.one_launch(split, 6, 32, torch.float32)
    outs = ng.rms_norm_gemm(x3, r3, gw, 1e-5, 0.0, ws, bs, config=split)
    eager = rms_norm_gemm_ref(x3, r3, gw, 1e-5, 0.0, ws, bs)
    assert outs[-1].shape == (2, 3, 32) and torch.equal(outs[-1], eager[-1])
    for o, e in zip(outs[:2], eager[:2], strict=True):
        assert o.shape == e.shape == (6, o.shape[1])
        torch.testing.assert_close(o, e, rtol=1e-5, atol=1e-5)


def test_launch_refuses_a_prologue_the_config_cannot_run():
    from rocm_inductor.providers.triton import gemm_merge as gm

    x, r, gw, ws, bs = _inputs(1, 64, (8,), torch.float32)
    split = gm.Config(1, 4, 32, 2, 4, 1, False, False, True, True)  # K split: no program holds a whole row
    with pytest.raises(ValueError, match="prologue"):
        gm.launch(x, ws, bs, split, norm=gm.NormPrologue(r, gw, 1e-5, 0.0, torch.empty_like(x)))


def test_op_validates_its_inputs():
    x, r, gw, ws, bs = _inputs(2, 16, (8,), torch.float32)
    op = torch.ops.rocm_fused.rms_norm_gemm
    with pytest.raises(ValueError, match="residual"):
        op(x, r[:1], gw, 1e-5, 0.0, ws, bs, "reference")
    with pytest.raises(ValueError, match="norm weight"):
        op(x, r, gw[:8], 1e-5, 0.0, ws, bs, "reference")
    with pytest.raises(ValueError, match="1-4 weights"):
        op(x, r, gw, 1e-5, 0.0, ws * 5, bs * 5, "reference")
    outs = op(x, None, gw, 1e-5, 0.0, ws, bs, "reference")
    assert len(outs) == 1 and outs[0].shape == (2, 8)


def _use_table(tmp_path, monkeypatch, entries):
    """Point the prologue table at a file of ``entries`` (read once per path by ``gemm_tables.load_table``) for
    the ``with`` block."""
    import json

    from rocm_inductor.providers.triton import gemm_knobs as knobs

    path = tmp_path / "norm_gemm_tuned.json"
    path.write_text(json.dumps({"entries": entries}))
    return knobs.override(norm_table=str(path))


def test_prologue_table_lookup(tmp_path, monkeypatch):
    from rocm_inductor.providers.triton import norm_gemm as ng

    cfg = {"block_m": 1, "block_n": 4, "block_k": 2048, "split_k": 1, "num_warps": 4, "num_stages": 1, "dot": False,
           "late": False, "full": True, "evict": True}
    rows = [{"device": "GPU", "m": 1, "k": 2048, "ns": [2048, 512, 512], "dtype": "bfloat16", "config": cfg,
             "fused_us": 6.1, "pair_us": 6.8},
            {"device": "GPU", "m": 1, "k": 2048, "ns": [8192, 8192], "dtype": "bfloat16", "config": cfg,
             "fused_us": 19.1, "pair_us": 19.0}]
    with _use_table(tmp_path, monkeypatch, rows):
        assert ng.prologue_config(1, 2048, (2048, 512, 512), torch.bfloat16, "GPU").block_n == 4
        assert ng.prologue_config(1, 2048, (8192, 8192), torch.bfloat16, "GPU") is None  # measured slower: not taken
        assert ng.prologue_config(2, 2048, (2048, 512, 512), torch.bfloat16, "GPU") is None  # BLOCK_M 1 < 2 rows
        assert ng.prologue_config(1, 2048, (2048, 512, 512), torch.bfloat16, "other") is None


# ---------------------------------------------------------------------------------------------- the pass


class _Block(torch.nn.Module):
    """Pre-norm attention input (add + RMSNorm -> q/k/v) and MLP input (RMSNorm -> gate/up), HF's spelling."""

    def __init__(self, h=32, extra_reader=False):
        super().__init__()
        self.g1, self.g2 = torch.nn.Parameter(torch.rand(h) + 0.5), torch.nn.Parameter(torch.rand(h) + 0.5)
        self.q, self.k, self.v = (torch.nn.Linear(h, n, bias=False) for n in (32, 16, 16))
        self.gate, self.up = torch.nn.Linear(h, 48, bias=False), torch.nn.Linear(h, 48, bias=False)
        self.extra_reader = extra_reader

    @staticmethod
    def _norm(x, g):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return g * (x.float() * torch.rsqrt(v + 1e-6)).to(x.dtype)

    def forward(self, x, res):
        s = x + res
        y = self._norm(s, self.g1)
        out = self.q(y) * torch.sigmoid(torch.cat([self.k(y), self.v(y)], -1))  # not an add: a plain RMSNorm next
        y2 = self._norm(out, self.g2)
        mlp = self.gate(y2) * self.up(y2)
        return (mlp, s, y2) if self.extra_reader else (mlp, s)


def _compiled_block(extra_reader: bool):
    """Compile :class:`_Block` with the fold on, check every output against eager, return the graph's capture."""
    torch.manual_seed(0)
    mod = _Block(extra_reader=extra_reader).eval()
    x, res = torch.randn(1, 3, 32), torch.randn(1, 3, 32)
    out, seen = compile_run(mod, x, res, options=OPTS)
    with torch.no_grad():
        eager = mod(x, res)
    for o, e in zip(out, eager, strict=True):
        torch.testing.assert_close(o, e, rtol=1e-5, atol=1e-5)
    (c,) = seen
    return c


def test_pass_folds_both_norms_and_keeps_the_sum():
    c = _compiled_block(extra_reader=False)
    assert c.after[FOLD] == 2 and c.after.get(MERGED, 0) == 0
    assert not any(k.startswith("rocm_fused.") and "rms_norm" in k and k != FOLD for k in c.after)
    notes = sorted(m.note for m in c.report.matches if m.op == "rms_norm_gemm")
    assert notes == ["RMSNorm -> 2 GEMMs (N 48/48) in one op, bucket M=3",
                     "add + RMSNorm -> 3 GEMMs (N 32/16/16) in one op, bucket M=3"]


def test_pass_leaves_a_norm_whose_output_is_read_elsewhere():
    c = _compiled_block(extra_reader=True)
    assert c.after[FOLD] == 1 and c.after[MERGED] == 1  # the gate/up norm's output is also returned
    (miss,) = [n for n in c.report.near_misses if n.pass_name == "norm_gemm"]
    assert "RMSNorm -> 2 GEMMs (N 48/48)" in miss.reason and "also read by" in miss.reason


class _VectorQKV(torch.nn.Module):
    """``nn.RMSNorm`` then q/k/v of a 1-D (K,) activation: ``F.linear`` reads ``unsqueeze(y, 0)``."""

    def __init__(self, h=32):
        super().__init__()
        self.norm = torch.nn.RMSNorm(h, eps=1e-6)
        self.q, self.k, self.v = (torch.nn.Linear(h, n, bias=False) for n in (32, 16, 16))

    def forward(self, x):
        y = self.norm(x)
        return self.q(y), self.k(y), self.v(y)


def test_pass_folds_a_1d_activation_through_its_unsqueeze():
    """Folded (it used to be skipped silently: the walk from the GEMM stopped at the ``unsqueeze``); the outputs
    keep eager's shapes and values."""
    torch.manual_seed(0)
    mod = _VectorQKV().eval()
    with torch.no_grad():
        mod.norm.weight.copy_(torch.rand(32) + 0.5)
    x = torch.randn(32)
    out, seen = compile_run(mod, x, options=OPTS)
    with torch.no_grad():
        eager = mod(x)
    for o, e in zip(out, eager, strict=True):
        assert o.shape == e.shape
        torch.testing.assert_close(o, e, rtol=1e-5, atol=1e-5)
    (c,) = seen
    assert c.after[FOLD] == 1 and c.after.get(MERGED, 0) == 0


def test_pass_is_off_unless_asked():
    torch.manual_seed(0)
    mod = _Block().eval()
    _, seen = compile_run(mod, torch.randn(1, 3, 32), torch.randn(1, 3, 32),
                          options={"passes": {"gemm_merge": True}})
    (c,) = seen
    assert c.after.get(FOLD, 0) == 0 and c.after[MERGED] == 2


def test_gpu_check_takes_only_measured_prologue_tiles(tmp_path, monkeypatch):
    """On a GPU the fold is a speed choice: refused (with the reason) where no measured tile won."""
    from rocm_inductor.ops.norm_gemm import norm_gemm_spec
    from rocm_inductor.providers.triton import norm_gemm as ng

    cfg = {"block_m": 1, "block_n": 4, "block_k": 2048, "split_k": 1, "num_warps": 4, "num_stages": 1, "dot": False,
           "late": False, "full": True, "evict": True}
    with _use_table(tmp_path, monkeypatch, [{"device": "GPU", "m": 1, "k": 2048, "ns": [64, 32], "dtype": "bfloat16",
                                            "config": cfg, "fused_us": 6.1, "pair_us": 6.8}]):
        monkeypatch.setattr(ng.gm, "_interpreting", lambda: False)
        monkeypatch.setattr(ng.gm, "check", lambda spec: None)  # the merged GEMM's own table is not under test here
        bf = torch.bfloat16

        def spec(m, ns):
            x = torch.empty(m, 2048, dtype=bf)
            return norm_gemm_spec(x, x, torch.empty(2048, dtype=bf), 0.0, [torch.empty(n, 2048, dtype=bf) for n in ns],
                                  [None] * len(ns), m)

        assert ng.check(spec(1, (64, 32)), device="GPU") is None
        assert "no measured prologue tile" in ng.check(spec(8, (64, 32)), device="GPU")
        assert "no measured prologue tile" in ng.check(spec(1, (128256,)), device="GPU")
        s = spec(1, (64, 32))
        s["m"] = None
        assert "symbolic M" in ng.check(s, device="GPU")
        asked = {**spec(8, (64, 32)), "dot_prologue": True}  # options={"features": {"norm_gemm_dot": True}}
        assert ng.check(asked, device="GPU") is None
        asked["dtype"] = torch.float16
        assert "overflow float16" in ng.check(asked, device="GPU")
        monkeypatch.setenv("ROCM_FUSED_GEMM_UNMEASURED", "1")
        assert ng.check(spec(8, (64, 32)), device="GPU") is None
