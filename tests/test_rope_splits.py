"""Issue 32, RoPE: every split of the rotated halves reaches the pass as slices (passes/splits.py), the complex
form with and without interleave, partial rotary with an upcast rotated part, near-RoPEs named by their cause.

Each spelling of rope_spellings.py's issue-32 section goes through scripts/recognition_census.py's ``run_case``
(compile up to the end of our passes, run the rewritten graph): op count, no near-miss, numerics contract against
eager and float64. Sources are named per spelling in rope_spellings.py.
"""

from __future__ import annotations

import operator
import sys
from pathlib import Path

import pytest
import rope_spellings as R
import torch
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from recognition_census import Case, run_case  # noqa: E402

from rocm_inductor.passes.canonicalize import canonicalize  # noqa: E402

aten = torch.ops.aten
#: the spellings added for issue 32 (the older ones are in test_spelling_corpus.py / test_rope_pass.py)
NEW = ["x_transformers_unbind_partial", "rotary_embedding_torch_unbind", "eva_vit_unbind", "timm_rot_stack_reshape",
       "timm_rot_cat_tensor_split_chunk", "torchtune_pairs", "deepseek_v3_complex_view", "llama4_polar_in_graph",
       "complex_halves_no_interleave", "falcon_rw_3d_positive_cat_dim", "codegen_partial_split",
       "glm_partial_interleaved", "cohere_interleaved_upcast", "qwen2_vl_mrope", "deepseek_v2_pairs_to_halves",
       "phi_remote_chunk_f32", "flash_attn_torch_chunk", "deepseek_v3_hf_pairs_in_halves_out"]
NEAR = {"near_rope_wrong_sign (negative)": "a rotation by -theta (the sign of sin is flipped)",
        "near_rope_wrong_halves (negative)": "not a rotation: it computes out0 = (cos-sin)*x0",
        "near_rope_swapped_outputs (negative)": "the two output halves are swapped",
        "near_rope_sign (negative)": "not a rotation: it computes out0 = cos*x0 + -sin*x1, out1 = -sin*x0"}


def _parts(x):
    a, b = x.chunk(2, -1)
    c, d = x.view(*x.shape[:-1], 2, -1).unbind(-2)
    e, f = x.view(*x.shape[:-1], -1, 2).unbind(-1)
    g, h = torch.split(x, [4, 12], -1)
    i = x[..., 2:].reshape(*x.shape[:-1], 7, 2)[..., 1]
    return a * b, c - d, e * f, g.sum(-1, keepdim=True) * h, i


def test_splits_become_slices_exactly():
    """chunk / split_with_sizes / unbind of a head view / unbind of pairs / pairs of a non-contiguous slice:
    slices of x itself after canonicalize, same values."""
    x = torch.randn(2, 3, 16)
    gm = make_fx(_parts, tracing_mode="fake")(x)
    canonicalize(gm.graph)
    gm.recompile()
    left = [n.target for n in gm.graph.nodes if n.target in (aten.split.Tensor, aten.split_with_sizes.default,
                                                              aten.unbind.int, aten.select.int, operator.getitem)]
    assert not left, left
    for o, e in zip(gm(x), _parts(x), strict=True):
        torch.testing.assert_close(o, e, rtol=0, atol=0)


def test_new_spellings_fully_rewritten():
    """Every issue-32 spelling (18): one op for q and k, no near-miss, within the numerics contract."""
    cases = R.census_cases()
    bad = {}
    for name in NEW:
        build, n = cases[name]
        r = run_case(Case("rope", name, build, n), options={"passes": {"rms_norm": False, "sampling": False}})
        if r.outcome != "full":
            bad[name] = (r.outcome, r.detail)
    assert not bad, bad


def test_near_ropes_left_alone_with_their_cause():
    cases = R.census_cases()
    for name, cause in NEAR.items():
        build, n = cases[name]
        r = run_case(Case("rope", name, build, n))
        assert r.outcome == "left alone" and r.rewritten == 0, (name, r)
        assert cause in r.detail and "verification failed" in r.detail, (name, r.detail)


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_float64_upcast_folded_and_verified(dtype):
    """``q.double()`` ... ``.to(q.dtype)`` around HF's rotation: folded like ``q.float()``, then verified (the op
    computes in float32)."""
    def fn(q, k, cos, sin):
        q64, k64 = q.double(), k.double()
        c, s = cos.double().unsqueeze(1), sin.double().unsqueeze(1)
        return ((q64 * c + R.rotate_half(q64) * s).to(q.dtype), (k64 * c + R.rotate_half(k64) * s).to(k.dtype))

    def build():
        q, k = R._census_inputs(dtype=dtype)
        return fn, (q, k, *R.hf_tables(2, 3, 16, dtype)), None

    r = run_case(Case("rope", "float64_upcast", build, 1))
    assert r.outcome == "full", r
