"""Benchmark per-layer decode attention over a static KV cache: ``rocm_fused::decode_attention`` vs the anchors.

Shapes (issue 13): Llama-3.2-1B (32 q / 8 kv heads, head_dim 64), Qwen3-0.6B (16 / 8, 128), gemma-2b (8 / 1,
256); batch in {1, 8, 32}; max_cache_len in {1024, 4096}; one query token; 513 valid positions (HF's
causal-from-position mask at cache_position 512: a (B, 1, 1, L) bool, True = attend); bfloat16. Every
implementation is captured ``--inner`` times in one CUDA graph and replayed ``--reps`` times (median, per
call), all in one process:

- ``inductor``: ``torch.compile`` (Inductor, static shapes) of HF's attention: ``repeat_kv`` (expand +
  reshape, which Inductor materialises as a clone) then SDPA with the mask;
- ``sdpa_packed``: SDPA with GQA packed into the query dim (q viewed as (B, Hkv, g, D)), exact, eager;
- ``flex``: compiled ``flex_attention`` with a block mask of the same positions and ``enable_gqa`` (its
  compiles are time-boxed by ``--flex-budget-s``; later shapes get no flex column);
- ``ours``: ``rocm_fused::decode_attention(..., "triton")`` (split-KV flash-decoding, mask-skip; the tuning
  store's config and its one-launch default);
- ``ours_two`` / ``ours_one``: our kernel with the same config forced to two launches (split + combine) / one
  launch (the last split program merges);
- ``ours_pos``: the positions form (the causal mask computed from the query position in the kernel, no mask
  tensor, no block skip), one launch;
- ``floor``: the HBM time of the valid K/V bytes (B x Hkv x 513 x (D + Dv) x 2 bytes) at the device-to-device
  copy bandwidth measured here (read + write counted, benchmarks/timing.py).

``--cold`` replays over enough copies of K/V (same values) that every call reads them from HBM (the H200's
50 MB L2 otherwise holds a B = 1 cache across the graph's calls; in a decode step the other layers' weights have
evicted it). ``--sweep`` also times ours over ``num_splits`` x ``BLOCK_N`` (written to ``attention_sweep.csv``),
two launches (with ``--sweep-one-launch`` one launch too), then at the fastest point one launch and the mask
without its block skip at 2 / 3 / the default pipeline stages (columns ``one_launch``, ``skip``,
``num_stages``), to tune the store's ``decode_attention`` entries (``scripts/convert_tuned_tables.py``);
``--from-sweep DIR`` (no GPU) re-reads such a run for the current heuristic (:func:`rebase`: its pick's time from
the sweep).

Writes ``attention_layer.csv`` / ``.md`` to ``--out`` (default benchmarks/results). About 2-3 minutes on an H200.

Usage: ``python benchmarks/ops/bench_attention.py [--out DIR] [--reps 10] [--inner 20] [--cold] [--sweep]
[--sweep-one-launch] [--no-flex] [--models llama-3.2-1b qwen3-0.6b]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from timing import copy_bandwidth_gbs, graph_time_us, write_results  # noqa: E402  (benchmarks/timing.py)

MODELS = (("llama-3.2-1b", 32, 8, 64), ("qwen3-0.6b", 16, 8, 128), ("gemma-2b", 8, 1, 256))
BATCHES = (1, 8, 32)
CACHE_LENS = (1024, 4096)
POSITION = 512  # cache_position of the decoded token: slots 0..512 valid (513)
DTYPE = torch.bfloat16


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    """HF transformers' ``repeat_kv`` (modeling_llama.py), verbatim."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def hf_attention(q, k, v, mask, scale: float, n_rep: int):
    """HF's SDPA attention (sdpa_attention_forward) for a StaticCache under torch.compile."""
    return F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), attn_mask=mask,
                                          dropout_p=0.0, scale=scale, is_causal=False)


def sdpa_packed(q, k, v, mask, scale: float):
    """SDPA with the g query heads of each kv head packed into the query dim (exact for Lq = 1)."""
    b, hq, _, d = q.shape
    hkv = k.shape[1]
    out = F.scaled_dot_product_attention(q.view(b, hkv, hq // hkv, d), k, v, attn_mask=mask, scale=scale)
    return out.view(b, hq, 1, v.shape[-1])


def _time(fn, args, calls: int = 1) -> float:
    """Median us per call, ``max(--inner, calls)`` calls per graph (``calls``: the K/V copies rotated)."""
    with torch.no_grad():
        return graph_time_us(fn, max(args.inner, calls), args.reps)


#: L2 bytes ``--cold`` rotates past (twice the H200's 50 MB L2).
COLD_BYTES = 100 << 20


def kv_sets(k, v, cold: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``[(k, v)]``, or with ``cold`` enough clones that their bytes pass :data:`COLD_BYTES` (at most 64)."""
    if not cold:
        return [(k, v)]
    n = min(64, -(-COLD_BYTES // (k.numel() * k.element_size() + v.numel() * v.element_size())))
    return [(k, v)] + [(k.clone(), v.clone()) for _ in range(n - 1)]


def rotating(fn, sets):
    """A call of ``fn(k, v)`` over the next of ``sets`` at each call (a captured graph holds one per call)."""
    state = {"i": 0}

    def call():
        kk, vv = sets[state["i"] % len(sets)]
        state["i"] += 1
        return fn(kk, vv)

    return call


def case(model, hq, hkv, d, b, lkv, copy_bw, args, state) -> tuple[dict, list[dict]]:
    """One (model, batch, cache length): the table row and, with ``--sweep``, the sweep rows."""
    from rocm_inductor.providers.triton import attention as tri

    torch._dynamo.reset()
    g = hq // hkv
    scale = d ** -0.5
    q = torch.randn(b, hq, 1, d, dtype=DTYPE, device="cuda")
    k = torch.randn(b, hkv, lkv, d, dtype=DTYPE, device="cuda")
    v = torch.randn(b, hkv, lkv, d, dtype=DTYPE, device="cuda")
    pos = torch.full((b,), POSITION, device="cuda")
    mask = (torch.arange(lkv, device="cuda")[None, :] <= pos[:, None])[:, None, None, :]
    valid = POSITION + 1
    floor_us = b * hkv * valid * 2 * d * 2 / (copy_bw * 1e9) * 1e6
    row = {"model": model, "max_cache_len": lkv, "batch": b, "inductor_us": "", "sdpa_packed_us": "",
           "flex_us": "", "ours_us": "", "ours_two_us": "", "ours_one_us": "", "ours_pos_us": "",
           "ours_splits": "", "floor_us": round(floor_us, 2), "ours_x_floor": "",
           "inductor_x_ours": "", "packed_x_ours": "", "ours_max_err": "", "best_sweep_us": "", "best_sweep_cfg": "",
           "note": ""}
    want = sdpa_packed(q, k, v, mask, scale)
    notes = []
    sets = kv_sets(k, v, args.cold)

    def record(key, fn_kv):
        fn = rotating(fn_kv, sets)
        try:
            out = fn_kv(k, v)
            torch.testing.assert_close(out.float(), want.float(), atol=2e-2, rtol=2e-2)
            row[key] = round(_time(fn, args, len(sets)), 2)
            return out
        except Exception as e:  # one failing implementation must not lose the table
            notes.append(f"{key}: {type(e).__name__}: {str(e)[:80]}".replace("\n", " "))
            return None

    ind = torch.compile(hf_attention, backend="inductor", dynamic=False, fullgraph=True)
    record("inductor_us", lambda kk, vv: ind(q, kk, vv, mask, scale, g))
    record("sdpa_packed_us", lambda kk, vv: sdpa_packed(q, kk, vv, mask, scale))
    if args.flex and time.perf_counter() - state["t0"] < args.flex_budget_s:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            def mask_mod(bi, h, qi, kvi):
                return kvi <= pos[bi]

            bm = create_block_mask(mask_mod, b, None, 1, lkv, device="cuda")
            flex = torch.compile(flex_attention, dynamic=False)
            record("flex_us", lambda kk, vv: flex(q, kk, vv, block_mask=bm, scale=scale, enable_gqa=True))
        except Exception as e:
            notes.append(f"flex: {type(e).__name__}: {str(e)[:80]}".replace("\n", " "))
    else:
        notes.append("flex skipped (time budget)")
    out = record("ours_us", lambda kk, vv: torch.ops.rocm_fused.decode_attention(q, kk, vv, mask, scale, "triton"))
    record("ours_two_us", lambda kk, vv: tri.decode_attention(q, kk, vv, mask, scale, inline_combine=False))
    record("ours_one_us", lambda kk, vv: tri.decode_attention(q, kk, vv, mask, scale, inline_combine=True))
    pos2 = pos[:, None]
    record("ours_pos_us", lambda kk, vv: tri.decode_attention(q, kk, vv, None, scale, positions=pos2,
                                                              inline_combine=True))
    cfg = tri.pick(b, hq, hkv, 1, lkv, d, d, DTYPE, tri.config.sm_count(torch.cuda.current_device()))
    row["ours_splits"] = f"{cfg['NSPLIT']}x{cfg['SPLIT_LEN']} bn{cfg['BLOCK_N']} ({cfg['source'].split(':')[0]})"
    if out is not None:
        row["ours_max_err"] = f"{(out.float() - want.float()).abs().max().item():.2e}"
        row["ours_x_floor"] = round(row["ours_us"] / floor_us, 2)
        for key, col in (("inductor_us", "inductor_x_ours"), ("sdpa_packed_us", "packed_x_ours")):
            if row[key] != "":
                row[col] = round(row[key] / row["ours_us"], 2)
    row["note"] = "; ".join(notes)
    sweep = []
    if args.sweep:
        def point(bn, ns, one=False, skip=True, stages=None):
            srow = {"model": model, "max_cache_len": lkv, "batch": b, "block_n": bn, "num_splits": ns,
                    "one_launch": int(one), "skip": int(skip), "num_stages": stages or "", "us": "", "note": ""}
            cfg = {"num_splits": ns, "block_n": bn, "skip": skip, "one_launch": one, "num_stages": stages}
            try:
                def fn(kk, vv):
                    return tri.decode_attention(q, kk, vv, mask, scale, inline_combine=one, config=cfg)
                torch.testing.assert_close(fn(k, v).float(), want.float(), atol=2e-2, rtol=2e-2)
                srow["us"] = round(_time(rotating(fn, sets), args, len(sets)), 2)
            except Exception as e:
                srow["note"] = f"{type(e).__name__}: {str(e)[:80]}".replace("\n", " ")
            sweep.append(srow)

        for pt in tri.config.sweep_points(lkv):
            ns, bn = pt["num_splits"], pt["block_n"]
            for one in (False, True) if args.sweep_one_launch and ns > 1 else (False,):
                point(bn, ns, one)
        grid = [r for r in sweep if r["us"] != ""]
        if grid:  # at the fastest two-launch point: one launch, and the mask without the block skip (pipelined)
            top = min(grid, key=lambda r: r["us"])
            bn, ns = top["block_n"], top["num_splits"]
            for one, skip, stages in ((True, True, None), (False, False, None), (False, False, 2),
                                      (False, False, 3), (True, False, 2)):
                if one and ns == 1:
                    continue
                point(bn, ns, one, skip, stages)
        timed = [r for r in sweep if r["us"] != ""]
        if timed:
            best = min(timed, key=lambda r: r["us"])
            row["best_sweep_us"] = best["us"]
            stages = best["num_stages"] or "auto"
            row["best_sweep_cfg"] = (f"{best['num_splits']} splits bn{best['block_n']}"
                                     + (" one launch" if best.get("one_launch") else "")
                                     + ("" if best.get("skip", 1) else f" no skip stages {stages}"))
    return row, sweep


def bench(args: argparse.Namespace) -> tuple[list[dict], list[dict], list[str]]:
    import triton

    import rocm_inductor  # noqa: F401  (registers the ops)

    torch.manual_seed(0)
    state = {"t0": time.perf_counter()}
    copy_bw = copy_bandwidth_gbs(5, 10)
    head = [f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on "
            f"{torch.cuda.get_device_name()} ({torch.cuda.get_device_properties(0).multi_processor_count} SMs), "
            f"torch {torch.__version__}, triton {triton.__version__}; D2D copy {copy_bw:.0f} GB/s; bf16, one "
            f"query token, {POSITION + 1} valid slots (HF bool mask (B, 1, 1, L)); CUDA-graph replay, median of "
            f"{args.reps} replays of {args.inner} calls; us per call (per layer)"
            + ("; --cold: K/V copies rotated past the L2 (each call reads HBM)." if args.cold else ".")]
    print(head[0], flush=True)
    rows, sweep = [], []
    models = [m for m in MODELS if not args.models or m[0] in args.models]
    for model, hq, hkv, d in models:
        for lkv in CACHE_LENS:
            for b in BATCHES:
                r, s = case(model, hq, hkv, d, b, lkv, copy_bw, args, state)
                rows.append(r)
                sweep += s
                print(f"{model} L={lkv} B={b}: {r}  [{time.perf_counter() - state['t0']:.0f} s]", flush=True)
                write(rows, sweep, head, args.out)  # after every case: a run cut short keeps what it measured
    return rows, sweep, head


def write(rows: list[dict], sweep: list[dict], head: list[str], out: str) -> str:
    """Write the table (and the sweep, if any) to ``out``; return the table's markdown."""
    if sweep:
        write_results(sweep, out, "attention_sweep", "Decode attention: ours over num_splits x BLOCK_N", head)
    return write_results(rows, out, "attention_layer", "Per-layer decode attention (issue 13)", head)


def rebase(rows: list[dict], sweep: list[dict], sms: int) -> list[dict]:
    """Table rows re-read for the *current* :func:`launch_config`: its pick's time taken from the same run's
    sweep (same kernels, same process and timing; ``ours_run_us`` keeps what the op measured with the launch
    heuristic of the run). Used when the heuristic was tuned from that sweep (``--from-sweep``).

    Args:
        rows, sweep: rows of ``attention_layer.csv`` and ``attention_sweep.csv`` (strings, as csv reads them).
        sms: SM count of the device the run used.

    Returns:
        new rows; a shape whose pick was not swept keeps ``ours_us`` empty and says so in ``note``.
    """
    from rocm_inductor.providers.triton import attention as tri

    heads = {m: (hq, hkv, d) for m, hq, hkv, d in MODELS}
    times = {(r["model"], int(r["max_cache_len"]), int(r["batch"]), int(r["block_n"]), int(r["num_splits"])):
             float(r["us"]) for r in sweep
             if r["us"] != "" and r.get("one_launch", "0") in ("", "0") and r.get("skip", "1") in ("", "1")}
    out = []
    for r in rows:
        hq, hkv, d = heads[r["model"]]
        lkv, b = int(r["max_cache_len"]), int(r["batch"])
        cfg = tri.launch_config(b, hkv, 1, lkv, hq // hkv, d, d, sms, rocm=False)
        us = times.get((r["model"], lkv, b, cfg["BLOCK_N"], cfg["NSPLIT"]))
        floor = float(r["floor_us"])
        new = {k: r[k] for k in ("model", "max_cache_len", "batch", "inductor_us", "sdpa_packed_us", "flex_us")}
        new.update({"ours_us": "" if us is None else us, "ours_cfg": f"{cfg['NSPLIT']} splits bn{cfg['BLOCK_N']}",
                    "ours_run_us": r["ours_us"], "floor_us": r["floor_us"],
                    "ours_x_floor": "" if us is None else round(us / floor, 2)})
        for key, col in (("inductor_us", "inductor_x_ours"), ("sdpa_packed_us", "packed_x_ours"),
                         ("flex_us", "flex_x_ours")):
            new[col] = round(float(r[key]) / us, 2) if us and r[key] != "" else ""
        new.update({"best_sweep_us": r["best_sweep_us"], "best_sweep_cfg": r["best_sweep_cfg"],
                    "note": r["note"] if us is not None else (r["note"] + "; pick not swept").strip("; ")})
        out.append(new)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "results"))
    p.add_argument("--reps", type=int, default=10, help="graph replays timed (median)")
    p.add_argument("--inner", type=int, default=20, help="calls captured per graph")
    p.add_argument("--sweep", action="store_true", help="also time ours over num_splits x BLOCK_N")
    p.add_argument("--sweep-one-launch", action="store_true", help="the sweep times one launch too")
    p.add_argument("--cold", action="store_true", help="rotate K/V copies past the L2 (HBM-cold calls)")
    p.add_argument("--no-flex", dest="flex", action="store_false", help="skip flex_attention")
    p.add_argument("--flex-budget-s", type=float, default=150.0,
                   help="no new flex_attention compiles after this many seconds")
    p.add_argument("--models", nargs="*", default=None, help="subset of model names")
    p.add_argument("--from-sweep", default=None, metavar="DIR",
                   help="no GPU: re-read DIR's attention_layer/attention_sweep CSVs for the current launch "
                        "heuristic (rebase) and write attention_layer.* to --out")
    p.add_argument("--sms", type=int, default=132, help="SM count of the --from-sweep run (H200: 132)")
    args = p.parse_args(argv)
    if args.from_sweep:
        import csv

        def read(stem):
            with open(os.path.join(args.from_sweep, f"{stem}.csv")) as f:
                return list(csv.DictReader(f))

        with open(os.path.join(args.from_sweep, "attention_layer.md")) as f:
            head = [ln.rstrip("\n") for ln in f if ln.startswith("Run ")]
        head += [f"ours_us: the committed launch heuristic's pick, timed in this run's sweep ({args.sms} SMs); "
                 "ours_run_us: the op with the run's first-guess heuristic; best_sweep: fastest swept config."]
        print(write_results(rebase(read("attention_layer"), read("attention_sweep"), args.sms), args.out,
                            "attention_layer", "Per-layer decode attention (issue 13)", head))
        return 0
    if not torch.cuda.is_available():
        print("bench_attention: needs a CUDA or ROCm GPU", file=sys.stderr)
        return 2
    rows, sweep, head = bench(args)
    print(write(rows, sweep, head, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
