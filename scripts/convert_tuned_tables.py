"""Write the shipped tuning decisions of one GPU model from its measured tables (``rocm_inductor/tuning/shipped``).

Inputs: the merged GEMM's table (``gemm_merge_tuned.json``, what ``benchmarks/sweeps/sweep_decode_gemm.py`` writes
to its ``--out`` folder) and the RMSNorm prologue table (``norm_gemm_tuned.json``, from
``benchmarks/ops/bench_norm_gemm_pair.py --tiles``), both ``{"entries": [rows]}`` (rows: ``tuning/tables.py``),
plus the measured on/off entries below (:data:`GATES`: the in-context losers the policy leaves to Inductor) and
the decode attention's fastest swept configs (``benchmarks/results/runs/attention_sweep.csv``, run
:data:`ATTN_RUN`).
Output: ``{"format": 1, "device": {"name", "arch"}, "about": [...], "entries": [decisions]}``.

The package's own tables were converted once (2026-12-02) and removed; to redo it from them::

    git show d85dda2:rocm_inductor/providers/triton/gemm_merge_tuned.json > /tmp/gemm.json
    git show d85dda2:rocm_inductor/providers/triton/norm_gemm_tuned.json > /tmp/norm.json
    python scripts/convert_tuned_tables.py --gemm /tmp/gemm.json --norm /tmp/norm.json \\
        --out rocm_inductor/tuning/shipped/nvidia_h200.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from rocm_inductor.ops.rms_norm import norm_spec  # noqa: E402
from rocm_inductor.ops.rope import rope_spec  # noqa: E402
from rocm_inductor.ops.sigmoid_gate import gate_spec  # noqa: E402
from rocm_inductor.tuning import tables  # noqa: E402
from rocm_inductor.tuning.store import FORMAT, Decision, signature  # noqa: E402


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, dtype=torch.bfloat16, device="meta")


def _gate_entries(source: str) -> list[Decision]:
    """The measured on/off choices of ``policy.py`` as decisions (H200, bf16, us per call in CUDA graphs).

    - per-head q/k norms (Qwen3-0.6B, head_dim 128, ``NORM_MIN_HIDDEN``): the decode step with them rewritten
      vs Inductor, B = 1 (benchmarks/results/runs/decode.csv, run 2026-11-29-decode-qk-norms; 0.957x / 0.992x at
      B = 8 / 32 in the same run);
    - RoPE in context (the HF graph rewritten vs Inductor, q (1, H_q, T, 128), k (1, H_kv, T, 128)):
      benchmarks/results/runs/rope.csv, run 2026-11-29-rope, rows ``inductor`` / ``pass[triton]``; the signature
      has ``tokens`` (q's tokens, the RoPE spec's own key);
    - the CUDA sigmoid gate in context (Qwen3-Next's gate slice + o_proj): benchmarks/results/runs/sigmoid_gate.csv,
      run 2026-11-29-gate, rows ``ctx``.
    """
    out = []
    for heads in (16, 8):  # Qwen3-0.6B's q norm (16 heads) and k norm (8 heads) at B = 1: rows = heads
        qk = norm_spec(_meta(1, 1, heads, 128), _meta(128), 0.0, False)
        out.append(Decision("rms_norm", signature("rms_norm", qk), "inductor", None,
                            {"inductor": 2343.1, "triton": 2514.9}, source,
                            "benchmarks/results/runs/decode.csv, run 2026-11-29-decode-qk-norms, qwen3 decode B=1 "
                            "(decode-step us)"))
    path = os.path.join(ROOT, "benchmarks/results/runs/rope.csv")
    rows: dict[tuple[int, int, int, int], dict[str, float]] = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["run_id"] == "2026-11-29-rope" and r["impl"] in ("inductor", "pass[triton]"):
                key = (int(r["H_q"]), int(r["H_kv"]), int(r["D"]), int(r["tokens"]))
                rows.setdefault(key, {})["inductor" if r["impl"] == "inductor" else "triton"] = float(r["us"])
    for (hq, hkv, d, t), times in sorted(rows.items()):
        spec = rope_spec(_meta(1, hq, t, d), _meta(1, hkv, t, d), _meta(1, t, d), d, False, False, cached=False,
                         head_axis=1)
        spec["tokens"] = t
        winner = "triton" if times["triton"] < times["inductor"] else "inductor"
        out.append(Decision("rope", signature("rope", spec), winner, None, times, source,
                            f"benchmarks/results/runs/rope.csv, run 2026-11-29-rope, H_q={hq} H_kv={hkv} D={d} "
                            f"tokens={t}"))
    for t, w, ind, ours in ((1, 4096, 8.9, 10.24), (32, 4096, 8.84, 10.15), (2048, 8192, 108.07, 126.67)):
        spec = gate_spec(_meta(t, w), _meta(t, w))
        out.append(Decision("sigmoid_gate", signature("sigmoid_gate", spec), "inductor", None,
                            {"inductor": ind, "triton": ours}, source,
                            f"benchmarks/results/runs/sigmoid_gate.csv, run 2026-11-29-gate, ctx tokens={t} width={w}"))
    return out


#: The attention sweep run the shipped ``decode_attention`` configs come from, and its line of ``about``.
ATTN_RUN = "2026-12-01-0826-attention-layer"
ATTN_ABOUT = ("Decode attention configs (op decode_attention): per (model shape, batch, cache length) the fastest "
              "num_splits x BLOCK_N of benchmarks/ops/bench_attention.py --sweep, 2026-12-01, NVIDIA H200, torch "
              "2.11.0+cu130, triton 3.6.0, 513 of the slots kept by an HF (B, 1, 1, L) bool mask, CUDA-graph replay "
              "of 20 calls on the same K/V (benchmarks/results/runs/attention_sweep.csv, run "
              "2026-12-01-0826-attention-layer); two launches.")


def attention_entries(source: str) -> list[Decision]:
    """The ``decode_attention`` decisions of :data:`ATTN_RUN` (``tuning.tables.attention_decisions``)."""
    with open(os.path.join(ROOT, tables.ATTN_EVIDENCE)) as f:
        return tables.attention_decisions(list(csv.DictReader(f)), source, ATTN_RUN)


def _run_ids() -> dict[tuple[str, str, int], str]:
    """(model, group, M) -> the latest run id of benchmarks/results/runs/decode_gemm_layer.csv."""
    out: dict[tuple[str, str, int], str] = {}
    with open(os.path.join(ROOT, tables.GEMM_EVIDENCE)) as f:
        for r in csv.DictReader(f):
            out[(r["model"], r["group"], int(r["M"]))] = r["run_id"]  # file order is time order
    return out


def convert(gemm: dict[str, Any], norm: dict[str, Any], name: str, arch: str) -> dict[str, Any]:
    """The shipped file for GPU ``name`` from the two tables' JSON (rows of other GPUs are skipped).

    Raises:
        ValueError: two rows of one table with the same (K, Ns, dtype, M).
    """
    source = f"shipped:{name}"
    runs = _run_ids()
    entries: list[Decision] = []
    for row in gemm.get("entries", []):
        if row["device"] == name:
            model, _, group = row.get("group", "").partition(" ")
            entries.append(tables.gemm_decision(row, source, runs.get((model, group, row["m"]), "")))
    entries += [tables.norm_decision(r, source) for r in norm.get("entries", []) if r["device"] == name]
    entries += _gate_entries(source)
    entries += attention_entries(source)
    seen = set()
    for d in entries:
        if (d.op, d.signature) in seen:
            raise ValueError(f"two rows for {d.op} {d.signature}")
        seen.add((d.op, d.signature))
    about = [t for t in (gemm.get("source"), norm.get("about")) if t] + [ATTN_ABOUT]
    return {"format": FORMAT, "device": {"name": name, "arch": arch}, "about": about,
            "entries": [d.to_json() for d in entries]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gemm", required=True, help="gemm_merge_tuned.json of the sweep")
    ap.add_argument("--norm", required=True, help="norm_gemm_tuned.json of the prologue benchmark")
    ap.add_argument("--name", default="NVIDIA H200", help="torch.cuda.get_device_name() of the rows to keep")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    with open(args.gemm) as f:
        gemm = json.load(f)
    with open(args.norm) as f:
        norm = json.load(f)
    data = convert(gemm, norm, args.name, args.arch)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    print(f"{args.out}: {len(data['entries'])} entries")


if __name__ == "__main__":
    main()
