"""Tensor-parallel all-reduce + residual add + RMSNorm pass: 2 ranks on CPU (gloo), providers' limits, stand-ins.

The 2-process test spawns two ranks (``torch.multiprocessing``, MASTER_ADDR 127.0.0.1, a free port); each
compiles a gpt-fast style TP decoder and a plain ``dist.all_reduce`` spelling with the real backend
(reference provider), checks the op counts and the outputs against the unfused eager run, dry-runs the
near-misses, and calls the FlashInfer / AITER wrappers against stand-ins with those libraries' signatures.
"""

from __future__ import annotations

import inspect
import json
import os
import pathlib
import socket
import sys
import types

import pytest
import torch
import torch.distributed as dist

AR = "_c10d_functional.all_reduce.default"
WAIT = "_c10d_functional.wait_tensor.default"
OURS = "rocm_fused.all_reduce_add_rms_norm.default"
OP = "all_reduce_add_rms_norm"
H = 64  # tests/norm_spellings.H

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="needs torch.distributed with gloo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------------------
# rank side
# --------------------------------------------------------------------------------------------------------
def _gpt_fast(rank: int, world: int) -> dict:
    from graph_utils import compile_run
    from tp_models import GptFastTransformer, apply_tp

    torch.manual_seed(0)  # same weights on every rank before sharding, as gpt-fast loads one checkpoint
    model = GptFastTransformer(n_layer=1).eval()  # one layer: each Inductor C++ kernel costs ~2 s to build
    apply_tp(model, rank, world)
    idx = torch.randint(0, 64, (1, 5))  # same tokens on every rank (seeded above)
    out, seen = compile_run(model, idx)
    (g,) = seen
    with torch.no_grad():
        eager = model(idx)
    # attention's all-reduce (broadcast residual add, then ffn_norm) and the MLP's (then the final norm)
    assert g.before[AR] == 2 and g.after[AR] == 0 and g.after[WAIT] == 0, (g.before, g.after)
    assert g.after[OURS] == 2, g.report
    assert g.report.count(OP) == 2 and g.report.providers()[OP] == ["reference"]
    assert not [m for m in g.report.near_misses if m.pass_name == "all_reduce_norm"], g.report
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
    return {"ours": g.after[OURS], "out": out.sum().item()}


def _plain(rank: int, world: int) -> dict:
    from graph_utils import assert_contract, compile_run
    from norm_spellings import SPELLINGS
    from tp_models import PlainTP

    names = ["hf_llama", "gemma", "weightless", "olmo2"]
    torch.manual_seed(0)
    m = PlainTP([SPELLINGS[n]() for n in names], H, H // world).to(torch.bfloat16).eval()
    torch.manual_seed(1 + rank)  # each rank holds its own activation shard
    x = torch.randn(2, 3, H // world, dtype=torch.bfloat16)
    torch.manual_seed(7)
    r = torch.randn(2, 3, H, dtype=torch.bfloat16)
    out, (g,) = compile_run(m, x, r)
    assert g.before[AR] == len(names) and g.after[AR] == 0, (g.before, g.after)
    assert g.after[OURS] == len(names) and g.report.count(OP) == len(names), g.report
    with torch.no_grad():
        eager = m(x, r)
        ref = m.float()(x.float(), r.float())  # float32 run of the same ranks' math: the accuracy baseline
        m.to(torch.bfloat16)
    for o, e, f in zip(out, eager, ref):
        assert_contract(o, e, f)
    # the new residual is the same on every rank (all-reduced)
    res = out[-1].float().contiguous()
    other = res.clone()
    dist.broadcast(other, src=0)
    torch.testing.assert_close(res, other, rtol=0, atol=0)
    return {"ours": g.after[OURS]}


def _near_misses(rank: int, world: int) -> dict:
    from torch.distributed import _functional_collectives as funcol

    import rocm_inductor

    group = dist.group.WORLD

    def norm(s, w):
        sf = s.float()
        return w * (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(s.dtype)

    def f(h, r, w):
        a = r + funcol.all_reduce(h, "max", group)                  # not a partial sum
        b = r + funcol.all_reduce(h * 2, "sum", group) * 0.5        # Granite's scaled residual: not an add
        red = funcol.all_reduce(h * 3, "sum", group)                # the reduced value is also returned
        c = red + r
        d = funcol.all_reduce(h * 4, "sum", group) + r              # a sum nobody normalises
        return norm(a, w), a, norm(b, w), b, norm(c, w), c, red, d

    h, r, w = torch.randn(4, H), torch.randn(4, H), torch.randn(H)
    rep = rocm_inductor.explain(f, h, r, w, dry_run=True, options={"provider": "reference", "strict": True})
    assert rep.count(OP) == 0, rep
    reasons = sorted(m.reason for m in rep.near_misses if m.pass_name == "all_reduce_norm")
    assert len(reasons) == 4, reasons
    text = " | ".join(reasons)
    for needle in ("'max', not 'sum'", "feeds aten.mul.Tensor", "also used elsewhere",
                   "residual add is not followed by an RMSNorm"):
        assert needle in text, (needle, text)

    def g(h, r, w):
        s = funcol.all_reduce(h, "sum", group) + r
        return norm(s, w), s

    # a provider that refuses at compile time: the match stays with Inductor, the reason is reported
    rep = rocm_inductor.explain(g, h, r, w, dry_run=True, options={
        "provider": "reference", "providers": {OP: "aiter"}, "strict": True})
    (miss,) = [m for m in rep.near_misses if m.pass_name == "all_reduce_norm"]
    assert rep.count(OP) == 0 and "aiter" in miss.reason and "ROCm only" in miss.reason, miss
    # a dynamic token count (serving engines mark the batch dim): rewritten, no workspace bound needed here
    hd, rd = torch.randn(6, H), torch.randn(6, H)
    torch._dynamo.mark_dynamic(hd, 0)
    torch._dynamo.mark_dynamic(rd, 0)
    rep = rocm_inductor.explain(g, hd, rd, w, dry_run=True, options={"provider": "reference", "strict": True})
    assert rep.count(OP) == 1, rep
    # the rms_norm pass off: nothing to extend, said so
    rep = rocm_inductor.explain(g, h, r, w, dry_run=True, options={
        "provider": "reference", "passes": {"rms_norm": False}, "strict": True})
    (miss,) = [m for m in rep.near_misses if m.pass_name == "all_reduce_norm"]
    assert "rms_norm pass did not run" in miss.reason, miss
    return {"near_misses": len(reasons)}


def _stand_ins(rank: int, world: int) -> dict:
    """FlashInfer's and AITER's wrappers against stand-ins with the libraries' real signatures (read from
    flashinfer 0.5.3 / 0.6.18 ``flashinfer/comm/trtllm_ar.py`` and ROCm/aiter ``aiter/dist/communication_op.py``),
    computing the reference math over the real gloo group."""
    from rocm_inductor.providers.aiter import AiterProvider
    from rocm_inductor.providers.flashinfer import FlashInferProvider
    from rocm_inductor.providers.reference import all_reduce_add_rms_norm_ref, rms_norm_ref

    gname = dist.group.WORLD.group_name
    calls: dict[str, dict] = {}

    def trtllm_create_ipc_workspace_for_all_reduce_fusion(tp_rank, tp_size, max_token_num, hidden_dim,
                                                          use_fp32_lamport=False, group=None,
                                                          create_metadata=False):
        calls["workspace"] = dict(tp_rank=tp_rank, tp_size=tp_size, max_token_num=max_token_num,
                                  hidden_dim=hidden_dim, group=group)
        return [[0]], torch.zeros(3, dtype=torch.int64)

    def trtllm_allreduce_fusion(allreduce_in, world_size, world_rank, token_num, hidden_dim, workspace_ptrs,
                                launch_with_pdl, trigger_completion_at_end, fp32_acc, pattern_code, use_oneshot,
                                allreduce_out, residual_in, residual_out, norm_out, quant_out, scale_out,
                                rms_gamma, rms_eps, scale_factor, layout_code, metadata=None,
                                block_quant_group_size=None, weight_bias=None):
        calls["fusion"] = dict(world_size=world_size, world_rank=world_rank, token_num=token_num,
                               hidden_dim=hidden_dim, pattern_code=pattern_code, weight_bias=weight_bias)
        red = allreduce_in.float().clone()
        dist.all_reduce(red)  # the kernel sums in float32 (fp32_acc) and rounds the residual once
        s = (red + residual_in.float()).to(allreduce_in.dtype)
        residual_out.copy_(s)
        norm_out.copy_(rms_norm_ref(s, rms_gamma, rms_eps, weight_bias or 0.0))

    comm = types.SimpleNamespace(
        AllReduceFusionPattern=types.SimpleNamespace(kAllReduce=0, kARResidualRMSNorm=1),
        trtllm_allreduce_fusion=trtllm_allreduce_fusion,
        trtllm_create_ipc_workspace_for_all_reduce_fusion=trtllm_create_ipc_workspace_for_all_reduce_fusion)
    fi = FlashInferProvider()
    fi._checked, fi._module = True, types.SimpleNamespace(comm=comm, __version__="stand-in")

    torch.manual_seed(1 + rank)
    x = torch.randn(3, 2, H, dtype=torch.bfloat16)
    torch.manual_seed(9)
    r, w = torch.randn(3, 2, H, dtype=torch.bfloat16), torch.randn(H, dtype=torch.bfloat16)
    for offset in (0.0, 1.0):
        y, s = fi.all_reduce_add_rms_norm(x, r, w, 1e-6, offset, gname)
        ey, es = all_reduce_add_rms_norm_ref(x, r, w, 1e-6, offset, gname)
        assert calls["fusion"]["pattern_code"] == 1 and calls["fusion"]["token_num"] == 6
        assert calls["fusion"]["weight_bias"] == (offset or None) and calls["fusion"]["world_size"] == world
        assert calls["workspace"]["tp_size"] == world and calls["workspace"]["tp_rank"] == rank
        ulp = torch.finfo(torch.bfloat16).eps
        # one rounding (float32 sum) vs eager's two (reduced, then + residual): within an ulp of the addends
        assert ((s.float() - es.float()).abs() <= ulp * (es.float().abs() + r.float().abs()) + 1e-6).all()
        torch.testing.assert_close(y, ey, rtol=2e-2, atol=2e-2)

    def tensor_model_parallel_fused_allreduce_rmsnorm(input_, residual_inp_, weight_, eps,
                                                      prefill_support=False, x_pad_to_multiple=0,
                                                      gemma_norm=False):
        calls["aiter"] = dict(shape=tuple(input_.shape), gemma_norm=gemma_norm, eps=eps)
        return all_reduce_add_rms_norm_ref(input_, residual_inp_, weight_, eps, 1.0 if gemma_norm else 0.0,
                                           gname)

    tp_group = types.SimpleNamespace(ranks=list(range(world)))
    mods = {
        "aiter": types.ModuleType("aiter"),
        "aiter.dist": types.ModuleType("aiter.dist"),
        "aiter.dist.communication_op": types.ModuleType("aiter.dist.communication_op"),
        "aiter.dist.parallel_state": types.ModuleType("aiter.dist.parallel_state"),
    }
    mods["aiter.dist.communication_op"].tensor_model_parallel_fused_allreduce_rmsnorm = \
        tensor_model_parallel_fused_allreduce_rmsnorm
    mods["aiter.dist.parallel_state"].model_parallel_is_initialized = lambda: True
    mods["aiter.dist.parallel_state"].get_tp_group = lambda: tp_group
    sys.modules.update(mods)
    try:
        ai = AiterProvider()
        spec = {"dtype": torch.bfloat16, "weight_dtype": torch.bfloat16, "hidden": H, "offset": 1.0,
                "max_tokens": 6, "world_size": world, "group_name": gname, "group_ranks": tuple(range(world))}
        assert ai._check_ar_norm(spec) is None
        assert "AITER's TP group" in ai._check_ar_norm({**spec, "group_ranks": (0, 5)})
        for offset in (0.0, 1.0):
            y, s = ai.all_reduce_add_rms_norm(x, r, w, 1e-6, offset, gname)
            ey, es = all_reduce_add_rms_norm_ref(x, r, w, 1e-6, offset, gname)
            assert calls["aiter"] == {"shape": (6, H), "gemma_norm": offset == 1.0, "eps": 1e-6}
            assert torch.equal(y, ey) and torch.equal(s, es)
    finally:
        for k in mods:
            sys.modules.pop(k, None)
    return {"stand_ins": 2}


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # two ranks on a shared 2-core machine
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import time

        result, t0 = {}, time.perf_counter()
        for case in (_gpt_fast, _plain, _near_misses, _stand_ins):
            result[case.__name__] = case(rank, world)
            result[case.__name__ + "_s"] = round(time.perf_counter() - t0, 1)
        pathlib.Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


# --------------------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # two processes, two real compiles each: ~40-55 s wall on the shared 2-core machine
def test_two_ranks_gloo(tmp_path):
    """gpt-fast TP decoder + plain dist.all_reduce spelling: rewritten on every rank, outputs as eager."""
    import torch.multiprocessing as mp

    tests_dir = str(pathlib.Path(__file__).resolve().parent)
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2))
    assert r0["_gpt_fast"]["ours"] == r1["_gpt_fast"]["ours"] == 2
    assert r0["_gpt_fast"]["out"] == r1["_gpt_fast"]["out"]  # the all-reduced logits agree across ranks
    assert r0["_plain"]["ours"] == r1["_plain"]["ours"] == 4
    assert r0["_near_misses"] == r1["_near_misses"] == {"near_misses": 4}
    print("rank 0 cumulative seconds:", {k: v for k, v in r0.items() if k.endswith("_s")})


def _spec(**kw):
    base = {"dtype": torch.bfloat16, "weight_dtype": torch.bfloat16, "hidden": 4096, "ndim": 2, "offset": 0.0,
            "fused_add": True, "tokens": 8, "max_tokens": 8, "world_size": 2, "group_name": "0",
            "group_ranks": (0, 1), "device": "cuda"}
    return {**base, **kw}


def test_vendor_limits_fall_back_with_reason():
    """Token counts, world sizes, dtypes outside a kernel's limits are refused at compile time, with why."""
    from rocm_inductor.providers._ar_norm_limits import (
        AITER_MAX_BYTES,
        AITER_MAX_HIDDEN,
        AITER_WORLD_SIZES,
        FLASHINFER_HIDDEN_MULTIPLE,
        FLASHINFER_MAX_TOKENS,
        FLASHINFER_WORLD_SIZES,
        check_ar_norm,
    )

    def fi(**kw):
        return check_ar_norm("FlashInfer", _spec(**kw), FLASHINFER_WORLD_SIZES, FLASHINFER_MAX_TOKENS, None,
                             FLASHINFER_HIDDEN_MULTIPLE)

    def ai(**kw):
        return check_ar_norm("aiter", _spec(**kw), AITER_WORLD_SIZES, None, AITER_MAX_BYTES, 8, AITER_MAX_HIDDEN)

    assert fi() is None and ai() is None
    assert "4096 tokens exceed the 2048-token workspace" in fi(tokens=4096, max_tokens=4096)
    assert "symbolic with no upper bound" in fi(tokens=None, max_tokens=None)
    assert fi(tokens=None, max_tokens=512) is None  # a dynamic batch with a known bound
    assert "no fused all-reduce kernel for 3 ranks" in fi(world_size=3)
    assert "not known in this process" in fi(world_size=None)
    assert "multiple of 8" in fi(hidden=4100)
    assert "float16/bfloat16 only" in fi(dtype=torch.float32, weight_dtype=torch.float32)
    assert "weight is float32" in fi(weight_dtype=torch.float32)
    assert ai(tokens=8192, max_tokens=8192) is not None and "fall back" in ai(tokens=8192, max_tokens=8192)
    assert ai(tokens=8191, max_tokens=8191, hidden=4096) is None  # 8191 * 4096 * 2 B < 64 MiB
    assert "6 ranks" in ai(world_size=6)
    assert "<= 16384" in ai(hidden=32768)


def test_providers_wired():
    """The op is registered with a fake, known to the providers that implement it, and in the policy."""
    from rocm_inductor import policy
    from rocm_inductor.options import PASS_NAMES
    from rocm_inductor.passes import all_passes
    from rocm_inductor.providers import get_provider

    assert OP in get_provider("reference").ops and OP in get_provider("flashinfer").ops
    assert OP in get_provider("aiter").ops
    assert "all_reduce_norm" in PASS_NAMES and "all_reduce_norm" in [p.name for p in all_passes()]
    assert [p.name for p in all_passes()].index("rms_norm") < [p.name for p in all_passes()].index(
        "all_reduce_norm")
    for plat in ("cuda", "rocm"):
        assert policy.PASS_DEFAULTS[plat]["all_reduce_norm"] is False
    sig = inspect.signature(get_provider("reference").all_reduce_add_rms_norm)
    assert list(sig.parameters) == ["x", "residual", "weight", "eps", "offset", "group_name"]
    fake = torch.ops.rocm_fused.all_reduce_add_rms_norm
    with torch._subclasses.FakeTensorMode():
        y, s = fake(torch.empty(3, 8), torch.empty(3, 8), None, 1e-6, 0.0, "0", "reference")
    assert y.shape == s.shape == (3, 8)


# --------------------------------------------------------------------------------------------------------
# two GPUs (NCCL): run by the lead on the 2-GPU machine (bash benchmarks/device.sh tests:...)
# --------------------------------------------------------------------------------------------------------
def _gpu_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        from graph_utils import compile_run
        from tp_models import GptFastTransformer, apply_tp

        from rocm_inductor.platform import PlatformDispatch
        from rocm_inductor.providers import get_provider
        from rocm_inductor.providers.reference import all_reduce_add_rms_norm_ref

        gname, plat = dist.group.WORLD.group_name, PlatformDispatch.platform()
        provs = [p for p in ("reference", "flashinfer", "aiter")
                 if get_provider(p).available(plat) is None and OP in get_provider(p).ops]
        result: dict = {"providers": provs}
        op = torch.ops.rocm_fused.all_reduce_add_rms_norm
        ulp = torch.finfo(torch.bfloat16).eps
        for tokens in (1, 8, 128):
            torch.manual_seed(1 + rank)
            x = torch.randn(tokens, 4096, device="cuda", dtype=torch.bfloat16)
            x2 = torch.randn_like(x)
            torch.manual_seed(0)
            r = torch.randn_like(x)
            w = (1 + 0.1 * torch.randn(4096, device="cuda")).to(torch.bfloat16)
            for p in provs:
                ey, es = all_reduce_add_rms_norm_ref(x, r, w, 1e-6, 0.0, gname)
                y, s = op(x, r, w, 1e-6, 0.0, gname, p)
                assert ((s.float() - es.float()).abs() <= ulp * (es.float().abs() + r.float().abs())).all(), p
                torch.testing.assert_close(y, ey, rtol=2e-2, atol=2e-2)
                # capture-safe: one captured call, replayed on new input contents
                xin = x.clone()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    gy, gs = op(xin, r, w, 1e-6, 0.0, gname, p)
                xin.copy_(x2)
                graph.replay()
                torch.cuda.synchronize()
                ey2, es2 = all_reduce_add_rms_norm_ref(x2, r, w, 1e-6, 0.0, gname)
                assert ((gs.float() - es2.float()).abs() <= ulp * (es2.float().abs() + r.float().abs())).all(), p
                torch.testing.assert_close(gy, ey2, rtol=2e-2, atol=2e-2)
        torch.manual_seed(0)
        # dim 512 >= policy.NORM_MIN_HIDDEN["cuda"]: the rms_norm pass rewrites the norms this pass extends
        model = GptFastTransformer(dim=512, n_head=8, hidden=1024).to("cuda", torch.bfloat16).eval()
        apply_tp(model, rank, world)
        idx = torch.randint(0, 64, (1, 8), device="cuda")
        out, (g,) = compile_run(model, idx, options={"provider": None, "strict": True,
                                                     "passes": {"rms_norm": True, "all_reduce_norm": True}})
        with torch.no_grad():
            eager = model(idx)
        torch.testing.assert_close(out, eager, rtol=5e-2, atol=5e-2)
        result["compiled"] = {"ours": g.after[OURS], "providers": g.report.providers().get(OP),
                              "near_misses": [m.reason for m in g.report.near_misses
                                              if m.pass_name == "all_reduce_norm"]}
        pathlib.Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpus_nccl(tmp_path):
    """Each usable provider vs the reference on 2 GPUs, eager and replayed from a CUDA graph; the gpt-fast TP
    decoder compiled with the platform's provider (rewritten when one takes it, else the reasons)."""
    import torch.multiprocessing as mp

    tests_dir = str(pathlib.Path(__file__).resolve().parent)
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    mp.spawn(_gpu_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(2))
    print("2-GPU all_reduce_norm:", r0)
    assert r0["compiled"]["ours"] == r1["compiled"]["ours"]
    if r0["compiled"]["providers"]:
        assert r0["compiled"]["ours"] == 4


def test_flashinfer_check_reads_the_release():
    """FlashInfer's check: Gemma only where the release's fusion takes ``weight_bias`` (0.6+), limits as data."""
    from rocm_inductor.providers.flashinfer import FlashInferProvider

    def fusion_053(allreduce_in, world_size, world_rank, token_num, hidden_dim, workspace_ptrs, launch_with_pdl,
                   trigger_completion_at_end, fp32_acc, pattern_code, use_oneshot, allreduce_out, residual_in,
                   residual_out, norm_out, quant_out, scale_out, rms_gamma, rms_eps, scale_factor, layout_code,
                   metadata=None):
        raise AssertionError("not called by check")

    def fusion_0618(*args, metadata=None, block_quant_group_size=None, weight_bias=None, **kw):
        raise AssertionError("not called by check")

    fi = FlashInferProvider()
    fi._checked = True
    for fusion, gemma_ok in ((fusion_053, False), (fusion_0618, True)):
        fi._module = types.SimpleNamespace(comm=types.SimpleNamespace(trtllm_allreduce_fusion=fusion))
        assert fi.check(OP, _spec()) is None
        assert (fi.check(OP, _spec(offset=1.0)) is None) == gemma_ok
        assert "2048-token workspace" in fi.check(OP, _spec(tokens=4096, max_tokens=4096))
        assert "need a weight" in fi.check(OP, _spec(weight_dtype=None))
    fi._module = types.SimpleNamespace(comm=types.SimpleNamespace())
    assert "no flashinfer.comm.trtllm_allreduce_fusion" in fi.check(OP, _spec())
