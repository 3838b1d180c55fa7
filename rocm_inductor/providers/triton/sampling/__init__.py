"""Triton sampler: temperature, top-k, top-p, min-p and one draw per row, capture-safe, split across programs.

Meaning: :func:`rocm_inductor.providers.reference_sampling.sample_ref` (HF's chain). No sort: each filter is
a *threshold* on the order-preserving int32 key of the float32 scaled logit (``bits`` for ``x >= 0``,
``(bits ^ 0x7FFFFFFF) + 1`` below: -0.0 and +0.0 share a key), found by an (NP+1)-ary search (NP pivots per
pass over the row; a fixed number of passes covers the 2^32 key range, see :func:`search_passes`):

- top-k: the largest key ``t`` with ``count(key >= t) >= k`` is the k-th largest logit exactly; keeping
  ``key >= t`` is HF's ``scores >= topk(scores, k)[0][..., -1]`` (ties at the k-th value kept).
- top-p: HF drops token i iff the ascending cumulative probability at i is ``<= 1 - p``. Without a sort,
  "cumulative at i" is taken as the mass of tokens with ``key <= key_i`` (all ties together), so the kept
  set is ``key >= t`` with ``t`` the largest key whose strictly-lower mass is ``<= (1 - p) * Z``. Equal to
  HF except where tokens *tie exactly* at the boundary: HF keeps the ones its sort happened to put last,
  we keep all of them. ``p <= 0`` keeps the largest token(s).
- min-p: ``exp(s - max) >= min_p`` (HF's ``probs >= min_p * max_prob``; the normaliser cancels).
- draw: Gumbel-max over the kept set, ``argmax(s_i - log(-log(u_i)))`` (exact categorical sampling from
  ``softmax(s)`` restricted to the kept set; Gumbel 1954, used for sampling by e.g. vLLM and gpt-fast's
  equivalent exponential race). ``u`` is Philox4x32-10 (Triton's ``tl.random.philox``) keyed by the seed
  read from a device tensor: column ``c`` of row ``r`` takes lane ``c % 4`` of the call at counter
  ``(c // 4, r)`` (one call serves four columns; :func:`_noise` on contiguous tiles, :func:`_noise_at` at
  gathered columns, the same values, so every path draws the same token): one independent stream per row, no
  host state, so a captured graph replays with whatever seed the graph's ``torch.randint`` drew, and the
  draw does not depend on how a row is split (except a top-p boundary within float32 rounding of the
  chunk-summed masses). The 24-bit uniforms bound the Gumbel tail at about 16.6 (a token ``e^16`` times
  less likely than the top one is drawn slightly too rarely).

Layout: each row is split into ``NCH`` chunks of ``CHUNK`` columns, grid ``(cdiv(B, ROWS), NCH)`` (small
vocabularies pack ``ROWS`` rows per program, one chunk each); every step is its own launch, and the host
issues a fixed number of launches that depends only on shapes and flags (CUDA/HIP-graph capturable: no
host sync, no host RNG):

1. row max per chunk -> ``PMAX[B, NCH]`` (with top-k, the first search pass's per-chunk counts too);
2. each further search pass: every program reduces the previous pass's per-chunk partials over the chunks
   in a fixed order (deterministic, no float atomics: the same seed gives bit-identical tokens), narrows
   the row's interval exactly as every other program of the row does (chunk 0 records it in ``ST`` for the
   next launch), and writes its chunk's per-pivot counts (top-k) or masses (top-p); the first top-p pass
   also writes the per-chunk normaliser ``Z``;
3. draw: the last pass is reduced, each chunk writes its Gumbel-max ``(value, index)``; a final launch
   picks each row's best chunk (ties -> lowest index, as ``torch.argmax``), skipped when ``NCH == 1``.

Launches (P = :func:`search_passes`, 11 for NP=8, 8 for NP=16, 6 for NP=64): top-k + top-p ``2P + 1``,
top-k only ``P + 1``, top-p only ``P + 2`` (the chain: ``len(chain_schedule(NP)) + 2``), neither 2; plus the pick
when ``NCH > 1``. A filter that is off for
the whole batch (host flags) costs no pass; a row whose filter is off or whose interval has converged keeps it.

Row path (no top-k: top-p and/or min-p, where :func:`.rows.row_path` measured it faster: V <= 65536, or B >= 64):
:mod:`.rows`, a split first pass plus one program per row deciding the chain's candidates in a loop, two
launches, the same tokens (top-p 0.9 at V=32000 B=64 63 -> 31 us: ``benchmarks/results/runs/sampling.csv``, run
2026-12-01-1709-sampling-rows). Elsewhere the chain below.

Restricted-winner chain (``knobs.Knobs.winner``, no top-k: top-p and/or min-p; issue 14; :func:`_chain_kernel`):
launch 1 also draws the whole-row Gumbel winner per chunk. Since the kept set ``K = {key >= t} & min-p`` lies inside
``S(lo) = {key >= lo} & min-p`` for any lower bound ``lo <= t`` of the search, the Gumbel-max ``c`` over ``S(lo)``
(same noise) is the draw's answer whenever ``key(c) >= t`` (lowest index among ties in both); a rejected ``c``
proves ``t > key(c)``. Each later launch narrows [lo, hi) with the chunk-summed masses (one pivot at ``key(c) + 1``
while undecided), closes a row whose candidate is kept (chunk 0 writes ``OUT``; ``hi <= key(c) + 1``), and draws the
next candidate over ``S(lo)`` for a row whose candidate fell below lo. A row's first candidate is kept with
probability about p (at once when it is the row max), a later one with more, so most rows close by launch 3-5;
programs whose rows are all closed return after one load of ``OUT`` (the host still issues the fixed launch
sequence), and the last launch (interval one key wide) draws exactly. Same tokens as the plain search
(tests/test_sampling_winner.py, tests/test_sampling_chain.py); min-p alone is launch 1 + one chain launch. The
chain's passes take NP pivots while the interval is wider than 2^24 keys, then 64 (:func:`chain_schedule`: 7 passes
at NP 8 instead of 11; by then nearly every row is closed and a launch costs its count, ~1.5 us): V=128256 B=32
top-p 0.9 79.8 -> 72.8 us, B=1 >= 22.6 -> 20.9 (run 2026-12-01-1925-sampling-chain-tail). The 64-pivot passes use a
narrower tile (:func:`chain_pass_shape`), so they sum the masses in another float32 order than the plain search:
where ``(1 - p) * Z`` is within rounding of the mass below a token the two can draw different tokens (3 of 256 draws
on inputs built for it, tests/test_sampling_chain_adversarial.py), the same exception as between two chunkings of a
row; the distribution is unchanged.

The search passes' compare tiles are (ROWS, NP, BLOCK), pivots on the slow axis (no lane repeats a column's
load / exp / key); large work accumulates them over the chunk and reduces once (``knobs.Knobs.acc_tile``).

Performance (H200, V=128256 float32 ``randn * 3``, T=0.7, op in a CUDA graph; ``benchmarks/results/runs/sampling.csv``):
top-p 0.9 alone 23.0 / 45.4 / 85.4 / 125.8 us at B = 1 / 8 / 32 / 64, min-p 0.1 alone 10.3 / 19.1 / 49.9 / 78.9
(run 2026-12-01-1253-sampling-op; the fastest FlashInfer release 44.5 / 51.4 / 65.4 / 106.6, run
2026-12-01-0903-sampling-flashinfer). At B=64 launch 1 (max + winner) is the largest launch and the first two chain
launches next; every program that still works re-reads its row's partials of the previous pass (NCH x NP values)
on top of its chunk. Finer chunks once few rows are open and a looping tail (one program per row running the
remaining passes) were slower (the tail 2-20x, run 2026-12-01-1555-sampling-chain-variants): not used.

Top-k path (issue 14; :func:`.configs.fast_path_ok`: a scalar ``0 < k <= topk_cap`` (64), top-p after top-k or off;
chosen on the host from flags only, so capture-safe): two launches, the logits read once in full.

1. ``_group_max_kernel``, grid (B, groups / CG): the max of ``x / T`` over each group of ``G`` columns (32;
   64 above V = 131072) -> ``GM[B, V / G]``.
2. ``_topk_draw_kernel``, one program per row (16 warps): T0 = a lower bound of the k-th largest group max
   with at most ``group_cap`` (64) groups reaching it (pivot search over the group maxima held in registers,
   stopped early; its first pass puts the pivots at geometric key distances below the row max,
   ``knobs.Knobs.fast_geo``). Every column >= the row's k-th value lies in those groups: their ``GCAP * G`` columns
   are gathered once into registers. The candidates with key >= T0 (about k) are packed ``key << 32 | column``
   into a per-row scratch row of ``cand_cap`` slots and read back; there the exact k-th value (ties kept)
   and top-p on the renormalised top-k set are one all-pairs compare each (no search), then min-p and the
   Gumbel-max draw, with the same (seed, column, row) noise, so the token equals the general path's
   (:func:`_topk_compact_draw`). A row with more than CAND_CAP candidates (ties) runs the pivot searches over
   the gathered columns (:func:`_topk_search_draw`), a row whose ties put more than ``GROUP_CAP`` groups at T0
   (e.g. a constant row) a whole-row loop (:func:`_topk_slow`), both inside the same launch.

Measured (H200, ``benchmarks/results/runs/sampling.csv``), HF chain (T=0.7, k=50, p=0.9) at B = 1 / 8: V=32000
19.5 / 19.5 us, V=128256 21.2 / 25.4 (the pivot-search tail before it: 28.6 / 28.2, 34.6 / 35.7; run
2026-12-01-1236-sampling-topk-tail); V=128256 22.8 / 26.1 / 28.0 / 32.9 us at B = 1 / 8 / 32 / 64 (run
2026-12-01-1253-sampling-op; FlashInfer 0.6.18: 115.7 / 139.6 / 165.0 / 235.8, run 2026-12-01-0903-sampling-flashinfer).

Modules: :mod:`.knobs` (the launch constants, :func:`.knobs.override`), :mod:`.common` (device functions every
kernel shares), :mod:`.configs` (launch shapes), :mod:`.search` (general path and chain kernels), :mod:`.topk`
(top-k path kernels), :mod:`.rows` (the row path: kernels and launcher), :mod:`.launch` (:func:`sample`),
:mod:`.aot` (ahead-of-time compile cases).

Limits (:func:`.configs.check`): scores float16/bfloat16/float32, 2D; B * V < 2^31 is not needed (int64 offsets).
"""

from __future__ import annotations

from typing import Any

from . import knobs
from .aot import AOT_SHAPES, _search_aot_cases
from .aot import aot_cases as _paths_aot_cases
from .common import AOT_FLAGS, FP_OPTIONS, _noise, _noise_at
from .configs import (
    INPUT_DTYPES,
    chain_pass_shape,
    chain_schedule,
    check,
    fast_config,
    fast_path_ok,
    lane_argmax,
    launch_config,
    search_passes,
    winner_passes,
)
from .knobs import Knobs, override
from .launch import sample
from .rows import aot_cases as _rows_aot_cases
from .rows import row_config, row_path, sample_rows
from .search import _chain_kernel, _pick_kernel, _step_kernel
from .topk import _group_max_kernel, _topk_draw_kernel

__all__ = ["AOT_FLAGS", "AOT_SHAPES", "FP_OPTIONS", "INPUT_DTYPES", "Knobs", "aot_cases", "chain_pass_shape",
           "chain_schedule", "check", "fast_config", "fast_path_ok", "knobs", "lane_argmax", "launch_config",
           "override", "row_config", "row_path", "sample", "sample_rows", "search_passes", "winner_passes",
           "_chain_kernel", "_group_max_kernel", "_noise", "_noise_at", "_pick_kernel", "_search_aot_cases",
           "_step_kernel", "_topk_draw_kernel"]


def aot_cases() -> list[dict[str, Any]]:
    """Every sampler kernel's ahead-of-time compile cases (``rocm_inductor.providers.triton._aot`` discovers the
    package): the top-k path's and the general path's / chain's (:func:`.aot.aot_cases`), then the row path's
    (:func:`.rows.aot_cases`), each with :data:`FP_OPTIONS` as launched."""
    return _paths_aot_cases() + _rows_aot_cases()
