"""The merged GEMM's and the RMSNorm prologue's measured rows as store decisions, and back.

The GEMM sweep (``benchmarks/sweeps/sweep_decode_gemm.py``) and the prologue-tile benchmark
(``benchmarks/ops/bench_norm_gemm_pair.py --tiles``) write rows; the package ships them as decisions
(``tuning/shipped/*.json``, written by ``scripts/convert_tuned_tables.py``), and ``providers/triton/gemm_tables.py``
reads them back as rows (:func:`rows`), so its bucket rules (smallest measured M >= m) keep one form.

Rows (us per call in CUDA graphs, weights streaming from HBM):

- GEMM: ``device``, ``m``, ``k``, ``ns`` (list), ``dtype`` (``"bfloat16"``), ``config`` (the
  ``gemm_configs.Config`` fields), ``ours_us``, ``separate_us`` (cuBLAS, one GEMM per weight), ``concat_us`` (one
  cuBLAS GEMM of the concatenated weights; ``""`` where not measured), ``floor_us`` (HBM floor), ``group``;
- prologue: the same keys up to ``config``, then ``fused_us`` (one launch) and ``pair_us`` (our norm kernel + the
  GEMM).
"""

from __future__ import annotations

import re
from typing import Any

from .store import Decision, parse_signature, signature

GEMM_OP = "merged_gemm"
NORM_OP = "rms_norm_gemm"
ATTN_OP = "decode_attention"

#: A single GEMM is taken only when ours beats cuBLAS by more than this fraction: the winner of a single's
#: decision, and ``providers/triton/gemm_tables.py:SINGLE_MIN_GAIN`` (which says why) for its refusals.
SINGLE_MIN_GAIN = 0.03

#: The results file of the GEMM rows (one row per model, group and M, with its run id).
GEMM_EVIDENCE = "benchmarks/results/runs/decode_gemm_layer.csv"
#: The results file of the prologue rows.
NORM_EVIDENCE = "benchmarks/results/runs/norm_gemm_pair.csv"

#: The results file of the decode attention's config sweep (``benchmarks/ops/bench_attention.py --sweep``).
ATTN_EVIDENCE = "benchmarks/results/runs/attention_sweep.csv"
#: The sweep's model shapes (``benchmarks/ops/bench_attention.py:MODELS``): name -> (Hq, Hkv, head dim).
ATTN_MODELS = {"llama-3.2-1b": (32, 8, 64), "qwen3-0.6b": (16, 8, 128), "gemma-2b": (8, 1, 256)}

_GROUP = re.compile(r", (?P<group>[^,]+) M=\d+$")


def _sig(row: dict[str, Any]) -> str:
    return signature(GEMM_OP, {"dtype": row["dtype"], "k": row["k"], "ns": tuple(row["ns"]), "m": row["m"]})


def gemm_decision(row: dict[str, Any], source: str, run_id: str = "") -> Decision:
    """The decision of one GEMM row: winner ``"triton"`` where ours beat separate cuBLAS (a single GEMM: by more
    than :data:`SINGLE_MIN_GAIN`), else ``"inductor"`` (the GEMMs stay with cuBLAS through Inductor)."""
    ours, sep = float(row["ours_us"]), float(row["separate_us"])
    single = len(row["ns"]) == 1
    wins = ours < sep * (1 - SINGLE_MIN_GAIN) if single else ours < sep
    times = {"triton": ours, "inductor": sep, "hbm_floor": row.get("floor_us")}
    if row.get("concat_us") not in ("", None):
        times["cublas_concat"] = row["concat_us"]
    run = f", run {run_id}" if run_id else ""
    return Decision(GEMM_OP, _sig(row), "triton" if wins else "inductor", dict(row["config"]),
                    {k: v for k, v in times.items() if v is not None}, source,
                    f"{GEMM_EVIDENCE}{run}, {row.get('group', '')} M={row['m']}")


def norm_decision(row: dict[str, Any], source: str) -> Decision:
    """The decision of one prologue row: ``"triton"`` (fold) where one launch beat the pair, else ``"inductor"``
    (leave the norm and the GEMM as the earlier passes rewrote them)."""
    fused, pair = float(row["fused_us"]), float(row["pair_us"])
    return Decision(NORM_OP, _sig(row), "triton" if fused < pair else "inductor", dict(row["config"]),
                    {"triton": fused, "unfolded": pair}, source,
                    f"{NORM_EVIDENCE}, fused vs pair ours, K={row['k']} M={row['m']}")


def row(d: Decision, device: str) -> dict[str, Any]:
    """The table row of decision ``d`` (the inverse of :func:`gemm_decision` / :func:`norm_decision`), for
    ``device`` (the GPU name the row is for), with ``winner``: the decision's, which decides the row
    (``providers/triton/gemm_tables.py:lost``).

    Raises:
        KeyError: ``d`` lacks the row's signature fields or times.
    """
    f = parse_signature(d.signature)
    out: dict[str, Any] = {"device": device, "m": int(f["m"]), "k": int(f["k"]),
                           "ns": [int(n) for n in f["ns"].split("/")], "dtype": f["dtype"],
                           "config": dict(d.config or {}), "winner": d.winner}
    t = d.times_us
    if d.op == NORM_OP:
        out.update(fused_us=t["triton"], pair_us=t["unfolded"])
        return out
    g = _GROUP.search(d.evidence)
    out.update(ours_us=t["triton"], separate_us=t["inductor"], concat_us=t.get("cublas_concat", ""),
               floor_us=t.get("hbm_floor"), group=g.group("group") if g else "")
    return out


def rows(decisions: list[Decision], device: str) -> list[dict[str, Any]]:
    """:func:`row` of each decision that has a static M and the times a row needs (level-2 decisions of a
    symbolic M bucket have no row)."""
    out = []
    for d in decisions:
        try:
            out.append(row(d, device))
        except (KeyError, ValueError):
            continue
    return out


def attention_signature(dtype: str, hq: int, hkv: int, lq: int, d: int, dv: int, b: int, lkv: int) -> str:
    """The store signature of a ``decode_attention`` kernel config (what ``providers/triton/attention/config.py``
    looks up): ``batch=1,dtype=bfloat16,head_dim=64,kv_len=1024,num_kv_heads=8,num_q_heads=32,q_len=1,...``."""
    return signature(ATTN_OP, {"dtype": dtype, "num_q_heads": hq, "num_kv_heads": hkv, "q_len": lq, "head_dim": d,
                               "v_head_dim": dv, "batch": b, "kv_len": lkv})


def attention_decisions(rows: list[dict[str, Any]], source: str, run_id: str) -> list[Decision]:
    """One decision per (model, batch, cache length) of a sweep run (rows of :data:`ATTN_EVIDENCE`, strings as
    csv reads them): winner ``"triton"``, config the fastest swept point's ``num_splits`` / ``block_n`` and, where
    the sweep has those columns, ``one_launch`` / ``skip`` / ``num_stages`` (a run without them timed two launches
    with the skip: left unset, the code's defaults), times the three fastest (``"triton"``, then
    ``"triton:<point>"``)."""
    by: dict[tuple[str, int, int], list[tuple[float, int, int, dict]]] = {}
    for r in rows:
        if r.get("run_id") != run_id or r.get("us") in ("", None) or r["model"] not in ATTN_MODELS:
            continue
        key = (r["model"], int(r["batch"]), int(r["max_cache_len"]))
        extra: dict[str, Any] = {}
        if r.get("one_launch") not in ("", None):
            extra["one_launch"] = r["one_launch"] == "1"
        if r.get("skip") not in ("", None):
            extra["skip"] = r["skip"] != "0"
        if r.get("num_stages") not in ("", None):
            extra["num_stages"] = int(r["num_stages"])
        by.setdefault(key, []).append((float(r["us"]), int(r["num_splits"]), int(r["block_n"]), extra))
    out = []
    for (model, b, lkv), timed in sorted(by.items()):
        timed.sort(key=lambda t: t[0])
        hq, hkv, d = ATTN_MODELS[model]
        us, ns, bn, extra = timed[0]

        def label(n: int, k: int, e: dict) -> str:
            return f"{n}x{k}" + "".join(f",{a}={int(v)}" for a, v in sorted(e.items()))

        times = {"triton": us, **{f"triton:{label(n, k, e)}": t for t, n, k, e in timed[1:3]}}
        out.append(Decision(ATTN_OP, attention_signature("bfloat16", hq, hkv, 1, d, d, b, lkv), "triton",
                            {"num_splits": ns, "block_n": bn, **extra}, times, source,
                            f"{ATTN_EVIDENCE}, run {run_id}, {model} B={b} L={lkv} (fastest of {len(timed)} swept)"))
    return out
