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

Row path (no top-k: top-p and/or min-p, where :func:`.sampling_rows.row_path` measured it faster: V <= 65536, or
B >= 64): :mod:`.sampling_rows`, a split first pass plus one program per row deciding the chain's candidates in a
loop, two launches, the same tokens (session 5: top-p 0.9 at V=32000 B=64 63 -> 31 us). Elsewhere the chain below.

Restricted-winner chain (:data:`WINNER`, no top-k: top-p and/or min-p; issue 14; :func:`_chain_kernel`):
launch 1 also draws the whole-row Gumbel winner per chunk. Since the kept set ``K = {key >= t} & min-p`` lies
inside ``S(lo) = {key >= lo} & min-p`` for any lower bound ``lo <= t`` of the search, the Gumbel-max ``c`` over
``S(lo)`` (same noise) is the draw's answer whenever ``key(c) >= t`` (lowest index among ties in both); a
rejected ``c`` proves ``t > key(c)``. Each later launch narrows [lo, hi) with the chunk-summed masses (one
pivot at ``key(c) + 1`` while undecided), closes a row whose candidate is kept (chunk 0 writes ``OUT``;
``hi <= key(c) + 1``), and draws the next candidate over ``S(lo)`` for a row whose candidate fell below lo.
A row's first candidate is kept with probability about p (at once when it is the row max), a later one with
more, so most rows close by launch 3-5; programs whose rows are all closed return after one load of ``OUT``
(the host still issues the fixed launch sequence), and the last launch (interval one key wide) draws exactly.
Same tokens as the plain search (tests/test_sampling_winner.py, tests/test_sampling_chain.py); min-p alone is
launch 1 + one chain launch. The chain's passes take NP pivots while the interval is wider than 2^24 keys, then 64
(:func:`chain_schedule`: 7 passes at NP 8 instead of 11; by then nearly every row is closed and a launch costs its
count, ~1.5 us): session 6, V=128256 B=32 top-p 0.9 79.8 -> 72.8 us, B=1 >= 22.6 -> 20.9 (H200, torch 2.11). The
64-pivot passes use a narrower tile (:func:`chain_pass_shape`), so they sum the masses in another float32 order than
the plain search: where ``(1 - p) * Z`` is within rounding of the mass below a token the two can draw different
tokens (3 of 256 draws on inputs built for it, tests/test_sampling_chain_adversarial.py), the same exception as
between two chunkings of a row; the distribution is unchanged.

The search passes' compare tiles are (ROWS, NP, BLOCK), pivots on the slow axis (no lane repeats a column's
load / exp / key); large work accumulates them over the chunk and reduces once (:data:`ACC_TILE`).

Performance (H200, 2026-12-01, V=128256 float32 ``randn * 3``, T=0.7, op in a CUDA graph; session topp2,
benchmarks/results/sampling_topp_session3.csv): top-p 0.9 alone 24.6 / 46.3 / 89.4 / 146.7 us at B = 1 / 8 /
32 / 64 with the chain and the four-lane noise (each at the constants :func:`launch_config` now picks, with
the draw code still compiled into launch 2; before:
42.6 / 86.1 / 171.8 / 239.5; FlashInfer's fastest 44.5 / 51.4 / 65.4 / 106.6); min-p 0.1 alone 11.1 / 20.0 /
47.5 / 81.9 (before 11.5 / 30.5 / 62.5 / 110.8). Merged build, draw compiled out of launch 2 (12:53 UTC,
benchmarks/results/sampling.csv): top-p 23.0 / 45.4 / 85.4 / 125.8 us, min-p 10.3 / 19.1 / 49.9 / 78.9.
At B=64 (topp2 call) launch 1 (max + winner) takes 39 us and the first
two chain launches 29 / 26 us; the rest 1.7-4.4 us each. Every program that still works re-reads its row's
partials of the previous pass (NCH x NP values) on top of its chunk.
Session 4 (same GPU and versions, benchmarks/results/sampling_final4_variants.csv): per-launch chunk / pivot
schedules for the chain (finer chunks once few rows are open) and a looping tail (one program per row running
the remaining passes) were built and timed: finer chunks were slower at V >= 128256 and the looping tail 2-20x
slower everywhere (155-2624 us), and the restructured launcher cost ~10 us at V=32000; they were reverted. Kept:
lane accumulators from ``B * V >= LANE_WORK`` and the NP-ary candidate pivot (:func:`_winner_pivot`). At
B=32 / 64 launches 2 and 3 are the largest after launch 1 (CUPTI, V=32000 B=64: 10.5 | 20.1, 15.3, 4.6, then
~2 us each); one launch per row (FlashInfer's shape) would remove the launch count, which is what small V pays.

Top-k path (issue 14; :func:`fast_path_ok`: a scalar ``0 < k <= TOPK_CAP`` (64), top-p after top-k or off;
chosen on the host from flags only, so capture-safe): two launches, the logits read once in full.

1. ``_group_max_kernel``, grid (B, groups / CG): the max of ``x / T`` over each group of ``G`` columns (32;
   64 above V = 131072) -> ``GM[B, V / G]``.
2. ``_topk_draw_kernel``, one program per row (16 warps): T0 = a lower bound of the k-th largest group max
   with at most ``GROUP_CAP`` (64) groups reaching it (pivot search over the group maxima held in registers,
   stopped early; its first pass puts the pivots at geometric key distances below the row max,
   :data:`FAST_GEO`). Every column >= the row's k-th value lies in those groups: their ``GCAP * G`` columns
   are gathered once into registers. The candidates with key >= T0 (about k) are packed ``key << 32 | column``
   into a per-row scratch row of :data:`CAND_CAP` slots and read back; there the exact k-th value (ties kept)
   and top-p on the renormalised top-k set are one all-pairs compare each (no search), then min-p and the
   Gumbel-max draw, with the same (seed, column, row) noise, so the token equals the general path's
   (:func:`_topk_compact_draw`). A row with more than CAND_CAP candidates (ties) runs the pivot searches over
   the gathered columns (:func:`_topk_search_draw`), a row whose ties put more than ``GROUP_CAP`` groups at T0
   (e.g. a constant row) a whole-row loop (:func:`_topk_slow`), both inside the same launch.

Measured on the H200 (2026-12-01 12:36 UTC, torch 2.11, triton 3.6, benchmarks/results/sampling_topk_session3.csv,
op in a CUDA graph, float32 randn * 3): HF chain (T=0.7, k=50, p=0.9) at B = 1 / 8: V=32000 19.5 / 19.5 us,
V=128256 21.2 / 25.4, V=151936 24.4 (B=1); the pivot-search tail of before 28.6 / 28.2, 34.6 / 35.7, 46.0 /
47.2. Merged build (12:53 UTC, benchmarks/results/sampling.csv), V=128256: 22.8 / 26.1 / 28.0 / 32.9 us at
B = 1 / 8 / 32 / 64 (FlashInfer 0.6.18: 115.7 / 139.6 / 165.0 / 235.8).

Limits (:func:`check`): scores float16/bfloat16/float32, 2D; B * V < 2^31 is not needed (int64 offsets).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .._sampling_args import ban_rows, per_row

INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# General (search) path constants, two buckets by ``B * V`` (launch_config). Picked by
# benchmarks/sweep_sampling.py on the H200 (2026-12-01, torch 2.11, triton 3.6, V=128256 float32 top-p 0.9
# alone, op in a CUDA graph, benchmarks/results/sampling_sweep.csv): small work (B = 1 / 8) best with 16
# pivots, 16384-element compare tiles, 4 warps (40.3 / 84.3 us; the previous 64 / 32768 / 8: 52.5 / 195.5);
# large work (B = 32 / 64) best with 8 pivots, the accumulated 8192-element tile and 1056 target programs
# (158.1 / 225.8 us; previous 16 / 32768 / 528: 175.0 / 328.7). Each bucket runs exactly its measured config;
# the target program counts were re-picked with the restricted-winner chain (SEARCH_TARGET_SMALL below).
#: Pivots per search pass: small work (launch-bound) / large work (compare-bound).
NPIV_SMALL = 16
NPIV_LARGE = 8
#: ``B * V`` up to which the small-work constants are used.
SMALL_WORK = 1 << 21
#: GPU, small work: elements of the (ROWS, NP, BLOCK) compare tile per step (reduced every step).
COMPARE_TILE = 16384
#: GPU chunking: aim at about this many programs (small / large work), chunk a power of two in range.
#: TARGET_PROGRAMS is also the top-k path's launch-1 target (fast_config).
TARGET_PROGRAMS = 528
TARGET_PROGRAMS_LARGE = 1056
#: General path only (session topp2, H200 2026-12-01, top-p 0.9 alone with the chain, V=128256,
#: benchmarks/results/sampling_topp_session3.csv): small work (B=8) 1056 programs 46.3 us (528: 51.1; B=1 is
#: 1024-column chunks either way); B*V up to MID_WORK (B=32) 528 programs 89.4 us (1056: 96.3); B=64 stays at
#: TARGET_PROGRAMS_LARGE (147 us; 528: 162).
SEARCH_TARGET_SMALL = 1056
MID_WORK = 1 << 22
TARGET_PROGRAMS_MID = 528
MIN_CHUNK = 1024
MAX_CHUNK = 16384
MAX_ROWS = 256
#: GPU, large work (or any work with :data:`ACC_SMALL`): search passes keep a (ROWS, NP, BLOCK) accumulator of
#: this many elements over the chunk and reduce it once (``ACC``); None: per-step reductions everywhere.
ACC_TILE: int | None = 8192
ACC_SMALL = False
#: GPU: warps of every search launch (None: 8 for compare tiles of >= 16384 elements, else 4; both measured
#: buckets run 4).
STEP_WARPS: int | None = 4
#: GPU: elements of the (ROWS, chunks, NP) tile that reduces the previous pass's partials.
REDUCE_TILE = 8192
#: Under ``TRITON_INTERPRET=1`` (CPU tests) numpy pays per op (and per device-function call), not per
#: element: one chunk per row, tiles up to Triton's 2^20-element limit, many rows per program.
INTERP_COMPARE_TILE = 1 << 20
INTERP_MAX_ROWS = 4096
INTERP_NPIV = 16
#: Top-k path (issue 14): a scalar k up to this takes the two-launch path (HF's default 50, the common 20/40).
TOPK_CAP = 64
#: Columns per group (launch 1 keeps one max per group) and groups gathered per row by launch 2 (2x TOPK_CAP:
#: bf16 logits tie often at the k-th group max). GPU tiles: FAST_TILE columns per step of launch 1.
GROUP = 32
GROUP_CAP = 64
FAST_TILE = 2048
#: Above this vocabulary the group is 2 * GROUP columns (so at most 4096 group maxima per row).
GROUP_WIDE_VOCAB = 131072
#: Pivots per search pass in launch 2 on a GPU: 8 (11 passes) while the candidate tile is <= 2048 columns,
#: else 4 (14 passes). AOT for sm_90 (triton 3.9, 16 warps, search passes as loops): V = 128256 (CT = 2048,
#: 8 pivots) 128 registers, no spills; V = 151936 (CT = 4096, 4 pivots) 48-80 bytes spilled (8 pivots with
#: unrolled passes: 4.4 KB). Unrolled passes (tl.static_range) compiled in 20-42 s per variant, as loops 1-2 s.
FAST_NPIV = 8
FAST_NPIV_WIDE = 4
#: Warps of launch 2 (16 * 64 = 1024 threads: the ROCm work-group limit); ``_WIDE``: vocabularies above
#: GROUP_WIDE_VOCAB (64-column groups, 4096 candidates). H200 2026-12-01 (torch 2.11, triton 3.6, HF chain, B=1,
#: benchmarks/results/sampling_topk_session3.csv): V=151936 8 warps 24.4 us vs 16 warps 26.8-29.3 us;
#: V <= 128256 16 warps (21.2 us) vs 8 warps (23.3 us).
NUM_WARPS2 = 16
NUM_WARPS2_WIDE = 8
#: Launch 2, compact tail (issue 14, B=1 latency): after the bound T0 every column >= the k-th value is among
#: the gathered candidates with key >= T0 (about k of them: the groups reaching T0 hold k..GROUP_CAP group maxima
#: and rarely a second column above T0). Up to CAND_CAP of them are packed (key << 32 | column) into a per-row
#: scratch row and the exact k-th value, HF top-p (mass of keys <= each key) and the draw run as one
#: all-pairs (CAND_CAP x CAND_CAP) compare each, instead of two pivot searches of ~7-11 dependent passes. A
#: row with more candidates (ties) takes the pivot searches. 0: pivot searches only (the path before).
#: H200 (same run), V=128256 B=1 HF chain: searches 34.6 us, compact tail 28.5, + geometric bound 21.2-24.6;
#: 256 slots with GROUP_CAP=128 36.1 (slower).
CAND_CAP = 128
#: Width of the j pieces of the compact tail's all-pairs compares (None: one CAND_CAP-wide tile); ``_WIDE`` as
#: NUM_WARPS2_WIDE. H200 (same run), HF chain B=1: V=32000 / 128256 pieces of 32: 19.5 / 21.2 us, of 64: 21.6 /
#: 23.4, one tile: 21.7 / 24.6; V=151936 (8 warps) pieces of 64: 24.4. AOT for sm_90 with triton 3.6 (the GPU
#: machine's), V=128256, 16 warps: one tile 96-120 B of stack, pieces of 32 or 64 none.
CAND_TILE: int | None = 32
CAND_TILE_WIDE: int | None = 64
#: Launch 2's bound search over the group maxima: pivots per pass (None: FAST_NPIV / FAST_NPIV_WIDE; 16 spills:
#: 280 B of sm_90 stack), and whether its first pass places the pivots at geometric key distances 2^31 .. 2^10
#: below the row max (the k-th group max of float logits lies ~2^20-2^23 keys below it; uniform pivots spend ~2
#: passes reaching there). H200 (same run), V=128256 B=1 HF chain: 34.6 -> 30.7 us on the searches alone.
FAST_NPIV_BOUND: int | None = None
FAST_GEO = True
INTERP_GROUP = 8
#: Tests turn this off to compare the two paths.
FAST_TOPK = True
#: No top-k (top-p and/or min-p): launch 1 draws the whole-row Gumbel winner, kept rows skip the rest
#: (``_step_kernel``'s ``WIN``). Tests turn this off to compare with the plain search.
WINNER = True
#: Lane accumulators for launch 1's max and the draws' argmax (``LANE``; same tokens): True / False everywhere,
#: None: on where ``B * V >= LANE_WORK`` (:func:`lane_argmax`). H200, torch 2.11, triton 3.6, top-p 0.9 alone, op in
#: a CUDA graph (benchmarks/results/sampling_topp_session4.csv, 2026-12-01 15:30 UTC), off -> on, us: V=128256
#: B=32 87.8 -> 83.9, B=64 131.4 -> 122.8; V=151936 B=32 98.7 -> 94.0, B=64 172.8 -> 160.4; min-p 0.1 alone
#: V=128256 B=64 77.0 -> 72.3; below 4e6 a tie or a loss (V=32000 B=32 56.9 -> 58.2, B=1 +1-4%).
LANE_ARGMAX: bool | None = None
#: ``B * V`` from which :data:`LANE_ARGMAX` None turns the lane accumulators on (V=128256 B=32 is 4.1e6, the
#: smallest clear win; V=32000 B=64, 2.05e6, gained 3% on a branch that was slower there: left off).
LANE_WORK = 4_000_000
#: The chain's pivot schedule (:func:`chain_schedule`): its passes take the launch's ``NP`` pivots while the key
#: interval is wider than ``CHAIN_TAIL_WIDTH``, then ``CHAIN_TAIL_NP`` (None: ``NP`` throughout). By then almost
#: every row is closed and its programs return at once, so what those launches cost is their count (~1.5 us each in
#: a CUDA graph, CUPTI), and 64 pivots cover the rest of the interval in fewer launches; while rows are still open
#: (the first ~3 passes at B=32) 64 pivots cost 8x the compares of 8. H200 2026-12-01 (torch 2.11, triton 3.6, top-p
#: 0.9 alone, op in a CUDA graph, benchmarks/results/sampling_chain_tail_session6.csv), us, no tail / tail after 2
#: passes / after 3: V=128256 B=1 (NP 16) >= 22.6 / 20.9 / 22.6, B=8 45.7 / 42.8 / 43.5, B=32 (NP 8) 79.8 / 79.9 /
#: 72.8; V=151936 B=32 88.0 / 92.8 / 85.3. 2^24 keys is 2 passes of 16 pivots, 3 of 8: the best of each.
CHAIN_TAIL_WIDTH = 1 << 24
CHAIN_TAIL_NP: int | None = 64
#: Compile options of every sampler launch: no FP contraction. Triton's ``x / T`` is ``div.full.f32`` on NVIDIA;
#: with contraction on, the ``sub.f32`` of ``exp(y - max)`` after it is fused by ptxas differently per kernel, so the
#: max of ``x / T`` (one kernel) and the same quotient minus it (another) disagreed: min-p >= 1 (keep the maxima) kept
#: nothing on the row path at T = 0.7 / 0.8 (H200, 2026-12-01, triton 3.6; exact at T = 0.5 / 1). Off, the PTX has
#: ``sub.rn`` / ``mul.rn`` (not fusable) and every path draws the plain search's token; timing unchanged (V=128256
#: top-p 0.9 B = 32 / 64: 73.1 / 107.5 us off vs 74.6 / 108.2 on), while IEEE ``div_rn`` cost 90.3 / 154.9 and
#: ``x * (1 / T)`` 73.9 / 130.0 (benchmarks/RESULTS.md, session 6). ROCm takes the same option (HIPOptions): not run
#: on an AMD GPU, only compiled ahead of time.
FP_OPTIONS = {"enable_fp_fusion": False}
#: Tests only: force this chunk width (a power of two) to exercise the split path under the interpreter.
FORCE_CHUNK: int | None = None
_KEY_MIN = tl.constexpr(-(2**31))  # a constexpr: compiled Triton reads no plain globals
_KEY_END = tl.constexpr(2**31)  # one past the largest key (held in int64)


def lane_argmax(b: int, v: int) -> bool:
    """Whether the general path's launches use per-lane max / argmax accumulators (``LANE``) for a (b, v)
    batch: :data:`LANE_ARGMAX` when set, else ``b * v >= LANE_WORK`` (measured there, see LANE_ARGMAX)."""
    return bool(LANE_ARGMAX) if LANE_ARGMAX is not None else b * v >= LANE_WORK


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits: ``spec["dtype"]`` in :data:`INPUT_DTYPES`; anything else is taken."""
    if spec.get("dtype") not in INPUT_DTYPES:
        return f"triton sampler takes float16/bfloat16/float32 scores, got {spec.get('dtype')}"
    return None


def _passes_to_width_one(ways: int) -> int:
    """Passes that shrink a 2^32-wide key interval to width 1 when each leaves at most ``ceil(d / ways)``."""
    d, n = 2**32, 0
    while d > 1:
        d, n = -(-d // ways), n + 1
    return n


def search_passes(npiv: int) -> int:
    """Passes of the (npiv+1)-ary search that always shrink a 2^32-wide key interval to width 1.

    A pass leaves an interval no wider than ``ceil(d / (npiv + 1))`` (pivots ``lo + d*j // (npiv+1)``).
    """
    return _passes_to_width_one(npiv + 1)


def winner_passes(npiv: int) -> int:
    """Passes of the restricted-winner chain that always shrink a 2^32-wide key interval to width 1: each pass
    leaves at most ``ceil(d / npiv)`` (:func:`_winner_pivot`); the same count as :func:`search_passes` at
    ``npiv`` = 8 (11) and 16 (8).

    Raises:
        ValueError: ``npiv < 2`` (one pivot at the candidate's key need not shrink the interval).
    """
    if npiv < 2:
        raise ValueError(f"the chain needs >= 2 pivots per pass, got {npiv}")
    return _passes_to_width_one(npiv)


def chain_schedule(npiv: int, width: int | None = None, tail: int | None = None) -> tuple[int, ...]:
    """Pivots per search pass of the restricted-winner chain: ``npiv`` while the key interval is wider than
    ``width`` keys (None: :data:`CHAIN_TAIL_WIDTH`), then ``tail`` (None: :data:`CHAIN_TAIL_NP`; 0, or that None:
    ``npiv`` throughout), as many passes as always shrink a 2^32-wide key interval to width 1 when a pass of ``n``
    pivots leaves at most ``ceil(d / n)`` (:func:`_winner_pivot`). ``chain_schedule(8, tail=0)`` has
    :func:`winner_passes` (11) entries; with the defaults ``(8, 8, 8, 64, 64, 64, 64)`` and ``chain_schedule(16)``
    ``(16, 16, 64, 64, 64, 64)``.

    Raises:
        ValueError: a pivot count below 2 (one pivot at the candidate's key need not shrink the interval) or not a
            power of two (``tl.arange(0, NP)`` and :func:`chain_pass_shape`'s tiles need one).
    """
    width = CHAIN_TAIL_WIDTH if width is None else width
    tail = CHAIN_TAIL_NP if tail is None else tail
    if min(npiv, tail or npiv) < 2:
        raise ValueError(f"the chain needs >= 2 pivots per pass, got {npiv} / {tail}")
    if any(n & (n - 1) for n in (npiv, tail or npiv)):
        raise ValueError(f"the chain's pivot counts must be powers of two, got {npiv} / {tail}")
    d, out = 2**32, []
    while d > 1:
        n = tail if tail and d <= width else npiv
        d, out = -(-d // n), out + [n]
    return tuple(out)


def chain_pass_shape(cfg: dict[str, int], npiv: int) -> dict[str, int]:
    """``BLOCK`` and ``CB`` of a chain pass with ``npiv`` pivots in a launch shaped by ``cfg``
    (:func:`launch_config`): the same ``ROWS * NP * BLOCK`` compare tile and ``ROWS * CB * NP`` reduction tile as
    ``cfg``'s own pivot count (powers of two; the grid, ``CHUNK`` and ``ROWS`` stay), BLOCK >= 4 (the noise takes
    four columns per Philox call); at ``cfg``'s own NP, its BLOCK and CB."""
    block = max(4, min(cfg["CHUNK"], cfg["BLOCK"] * cfg["NP"] // npiv))
    cb = max(1, min(cfg["NCHB"], cfg["CB"] * cfg["NP"] // npiv))
    return {"BLOCK": block, "CB": cb}


def launch_config(b: int, v: int, chunk: int | None = None, interp: bool | None = None) -> dict[str, int]:
    """Launch shape for a (b, v) batch.

    Returns:
        dict with ``CHUNK`` (columns per program, a power of two), ``NCH`` (chunks per row), ``BLOCK``
        (tile width), ``ROWS`` (rows per program, at most next_pow2(b)), ``NP`` (pivots per pass), ``NCHB``
        (next_pow2(NCH)), ``CB`` (chunks per step of the partial reduction), ``num_warps`` (4 or 8:
        num_warps * 64 <= 1024 for ROCm's 64-wide waves).

    GPU: ``CHUNK = clamp(next_pow2(b * v / TARGET_PROGRAMS), MIN_CHUNK, MAX_CHUNK)`` (B=1, V=151936: 1024
    columns, 149 programs, NP=64; B=64: 16384 columns, 640 programs, NP=16), capped at next_pow2(v);
    ``ROWS * BLOCK * NP <= COMPARE_TILE``. The constexprs depend on b, so a few batch buckets compile their
    own variants. Interpreter: one chunk per row, ``ROWS * BLOCK * NP <= 2^20`` (Triton's numel limit).
    ``chunk`` (or :data:`FORCE_CHUNK`) overrides the chunk width (tests); ``interp`` (default: whether
    ``TRITON_INTERPRET=1``) picks the interpreter's shape or the GPU's (``aot_cases`` asks for the GPU's).
    """
    from . import interpreting

    interp = interpreting() if interp is None else interp
    vp = triton.next_power_of_2(max(v, 1))
    chunk = chunk or FORCE_CHUNK
    small = b * v <= SMALL_WORK
    acc = bool(ACC_TILE) and (ACC_SMALL or not small)
    if interp:
        npiv, max_rows, red = INTERP_NPIV, INTERP_MAX_ROWS, INTERP_COMPARE_TILE
        tile = INTERP_COMPARE_TILE // npiv
        chunk = chunk or vp
    else:
        npiv = NPIV_SMALL if small else NPIV_LARGE
        tile, max_rows, red = (ACC_TILE if acc else COMPARE_TILE) // npiv, MAX_ROWS, REDUCE_TILE
        target = (SEARCH_TARGET_SMALL if small else TARGET_PROGRAMS_MID if b * v <= MID_WORK
                  else TARGET_PROGRAMS_LARGE)
        if not chunk:
            chunk = min(max(triton.next_power_of_2(triton.cdiv(b * v, target)), MIN_CHUNK), MAX_CHUNK)
    chunk = max(min(triton.next_power_of_2(chunk), vp), 4)  # >= 4: the noise takes four columns per Philox call
    nch = triton.cdiv(v, chunk)
    block = min(chunk, tile)
    rows = max(1, min(max_rows, tile // block, triton.next_power_of_2(max(b, 1))))
    nchb = triton.next_power_of_2(nch)
    cb = min(nchb, max(1, red // (rows * npiv)))
    warps = STEP_WARPS or (8 if rows * block * npiv >= 16384 else 4)
    return dict(CHUNK=chunk, NCH=nch, BLOCK=block, ROWS=rows, NP=npiv, NCHB=nchb, CB=cb, num_warps=warps,
                ACC=acc)


@triton.jit
def _scaled(x, t):
    """``x / t``, the scaled logit every pass of every sampler kernel computes through this one function; launched
    with :data:`FP_OPTIONS` (no FP contraction) so the same quotient is the same float in every kernel."""
    return x / t


@triton.jit
def _key(y):
    """float32 -> int32 key with the same order (NaN never reaches here): ``bits`` for ``y >= +0``, minus the
    magnitude bits below (``(bits ^ 0x7FFFFFFF) + 1``), so -0.0 and +0.0 share key 0 (they are equal logits: HF's
    ``scores < kth`` keeps both); -inf is ``-2^31 + 2^23``. Inverse: :func:`_unkey`."""
    bits = y.to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, (bits ^ 0x7FFFFFFF) + 1)


@triton.jit
def _unkey(k):
    """int32 key -> the float32 it came from (key 0 -> +0.0; ``_KEY_MIN``, below every real key, -> NaN)."""
    return tl.where(k >= 0, k, (tl.maximum(k, _KEY_MIN + 1) - 1) ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@triton.jit
def _running_argmax(score, best, best_i, base):
    """Fold one (ROWS, BLOCK) block of draw scores into each row's running (best, index): strictly greater
    wins, so ties keep the lowest column (``torch.argmax``'s rule); ``base`` is the block's first column."""
    return _fold_best(tl.max(score, axis=1), tl.argmax(score, axis=1).to(tl.int64) + base, best, best_i)


@triton.jit
def _lane_best(score, cols, bv, bi):
    """Per lane of a (ROWS, BLOCK) tile, the running best draw score and its column (``LANE``): strictly greater
    wins, so each lane keeps its lowest column among ties (columns grow along the loop)."""
    better = score > bv
    return tl.where(better, score, bv), tl.where(better, cols, bi)


@triton.jit
def _fold_draw(score, base, bv, bi, best, best_i, ROWS: tl.constexpr, BLOCK: tl.constexpr, LANE: tl.constexpr):
    """Fold one (ROWS, BLOCK) block of draw scores (first column ``base``) into the running draw: the per-lane
    accumulators ``bv``/``bi`` of :func:`_lane_best` (``LANE``) or each row's (best, best_i) of
    :func:`_running_argmax`; the other pair passes through unchanged (callers without LANE pass placeholders)."""
    if LANE:
        cols = (base + tl.arange(0, BLOCK))[None, :] + tl.zeros([ROWS, BLOCK], tl.int32)
        bv, bi = _lane_best(score, cols.to(tl.int64), bv, bi)
    else:
        best, best_i = _running_argmax(score, best, best_i, base)
    return bv, bi, best, best_i


@triton.jit
def _lane_reduce(bv, bi):
    """Per row, (best, index) of the lane accumulators of :func:`_lane_best`: the lowest column among the lanes
    holding the maximum, i.e. what the block-wise :func:`_running_argmax` gives (all -inf: the first lane's
    initial column, the chunk's first)."""
    best = tl.max(bv, axis=1)
    return best, tl.min(tl.where(bv == best[:, None], bi, _KEY_END), axis=1)


@triton.jit
def _fold_best(blk, blk_i, best, best_i):
    """Per row, the running (best, index) after one more block's (blk, blk_i): strictly greater wins."""
    better = blk > best
    return tl.where(better, blk, best), tl.where(better, blk_i, best_i)


@triton.jit
def _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr):
    """(ROWS, BLOCK) float32 logits: -inf outside V, NaN -> -inf, log of probabilities, banned -> -inf."""
    cmask = cols < V
    m2 = rmask[:, None] & cmask[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=m2, other=float("-inf")).to(tl.float32)
    if IS_PROBS:
        x = tl.log(x)
    x = tl.where(x != x, float("-inf"), x)
    if HAS_BAN:
        b = tl.load(BAN + rows[:, None] * stride_ban + cols[None, :], mask=m2, other=0)
        x = tl.where(b != 0, float("-inf"), x)
    return x, m2


@triton.jit
def _row_top_p(P_PTR, rows, rmask, p_val, omp_val, P_ROWS: tl.constexpr, ROWS: tl.constexpr):
    """(ROWS,) float32 ``p`` (clamped into [1e-30, 1 - 2^-24], 0 and 1 kept; a per-row NaN -> 1, off, as the
    reference: ``cumsum <= 1 - NaN`` drops nothing) and ``1 - p`` (a tensor wins over the scalars). A per-row
    float64 ``p`` gives ``1 - p`` rounded once to float32, as HF's threshold for a float32 top_p (exact
    difference, one rounding) and for dynamic=True's 0-d float64 one."""
    if P_ROWS:
        p64 = tl.load(P_PTR + rows, mask=rmask, other=1.0).to(tl.float64)
        omp = (1.0 - p64).to(tl.float32)
        p = tl.where(p64 < 1.0, tl.minimum(p64.to(tl.float32), 0.99999994), 1.0)
        p = tl.where(p64 > 0.0, tl.maximum(p, 1e-30), tl.where(p64 <= 0.0, 0.0, p))
    else:
        p = tl.zeros([ROWS], dtype=tl.float32) + p_val
        omp = tl.zeros([ROWS], dtype=tl.float32) + omp_val  # 1 - p rounded once, as HF's threshold
    return p, omp


@triton.jit
def _row_min_p(MINP_PTR, rows, rmask, minp_val, MINP_ROWS: tl.constexpr, ROWS: tl.constexpr):
    """(ROWS,) float32 min-p (a tensor wins over the scalar); HF drops ``probs < min_p * max``: NaN drops
    nothing, and its top token survives any min_p (min_p > 1 -> 1 keeps the maxima)."""
    if MINP_ROWS:
        mp = tl.load(MINP_PTR + rows, mask=rmask, other=0.0).to(tl.float32)
    else:
        mp = tl.zeros([ROWS], dtype=tl.float32) + minp_val
    return tl.where(mp > 1.0, 1.0, mp)


@triton.jit
def _philox4(seed, c4, r):
    """The four uint32 lanes of Philox4x32-10 (``tl.random.philox``: Salmon et al. 2011) keyed by ``seed``
    (int64) at counter ``(c4, r, 0, 0)``: int tiles of one shape (column // 4, row)."""
    c4 = c4.to(tl.uint32)
    return tl.random.philox(seed, c4, r.to(tl.uint32), c4 * 0, c4 * 0)


@triton.jit
def _gumbel(r):
    """Gumbel noise ``-log(-log(u))`` of the 24-bit uniform ``u`` made from uint32 ``r``."""
    return -tl.log(-tl.log(tl.random.uint_to_uniform_float(r)))


@triton.jit
def _noise(seed, col0, rows, ROWS: tl.constexpr, W: tl.constexpr):
    """(ROWS, W) float32 Gumbel noise of columns ``col0 .. col0 + W - 1`` (``col0 % 4 == 0``, ``W % 4 == 0``):
    column c of row r is lane ``c % 4`` of Philox(seed; counter (c // 4, r)), so one Philox call serves four
    columns (the draw's noise everywhere; :func:`_noise_at` gives the same values at arbitrary columns)."""
    q = col0 // 4 + tl.arange(0, W // 4)
    c4 = q[None, :] + tl.zeros([ROWS, W // 4], dtype=tl.int32)
    r2 = rows[:, None] + tl.zeros([ROWS, W // 4], dtype=tl.int64)
    a, b, c, d = _philox4(seed, c4, r2)
    # join(join(a, c), join(b, d)) is (ROWS, W/4, 2, 2) with [.., i, j] = (a, b, c, d)[2i + j]: row-major
    # reshape puts lane l of counter q at column 4q + l
    u = tl.reshape(tl.join(tl.join(a, c), tl.join(b, d)), [ROWS, W])
    return _gumbel(u)


@triton.jit
def _noise_at(seed, cols, rows, ROWS: tl.constexpr, W: tl.constexpr):
    """:func:`_noise` at a (ROWS, W) int tile of arbitrary columns ``cols`` (one Philox call per element: the
    top-k path's gathered candidates)."""
    r2 = rows[:, None] + tl.zeros([ROWS, W], dtype=tl.int64)
    a, b, c, d = _philox4(seed, cols // 4, r2)
    lane = cols % 4
    return _gumbel(tl.where(lane == 0, a, tl.where(lane == 1, b, tl.where(lane == 2, c, d))))


@triton.jit
def _pivots(lo, hi, NP: tl.constexpr):
    """(ROWS, NP) int32 pivots strictly inside (lo, hi) whenever hi - lo >= 2 (lo/hi int64 (ROWS,))."""
    j = tl.arange(0, NP).to(tl.int64) + 1
    d = hi - lo
    return (lo[:, None] + (d[:, None] * j[None, :]) // (NP + 1)).to(tl.int32)


@triton.jit
def _narrow(lo, hi, piv, ok):
    """Shrink (lo, hi) given per-pivot predicate ``ok`` (true on a prefix of increasing pivots); rows
    already at width <= 1 keep their interval."""
    p64 = piv.to(tl.int64)
    new_lo = tl.maximum(lo, tl.max(tl.where(ok, p64, lo[:, None]), axis=1))
    new_hi = tl.minimum(hi, tl.min(tl.where(ok, hi[:, None], p64), axis=1))
    active = (hi - lo) > 1
    return tl.where(active, new_lo, lo), tl.where(active, new_hi, hi)


@triton.jit
def _count_ge(kk, m2, piv):
    """(ROWS, NP) int32: per pivot, how many in-range keys of the (ROWS, BLOCK) tile are >= it. Pivots of a
    row still searching are > -2^31, so out-of-range columns are given that key (one 2D select, not a 3D
    mask)."""
    return tl.sum(_count_ge3(kk, m2, piv), axis=2)


@triton.jit
def _count_ge_reg(kk, m2, piv):
    """:func:`_count_ge` on a (ROWS, W, NP) tile (pivots on the fast axis): the top-k path's register-resident
    searches, whose keys are computed once outside the loop; the layout its H200 timings ran with."""
    kk = tl.where(m2, kk, _KEY_MIN)
    return tl.sum((kk[:, :, None] >= piv[:, None, :]).to(tl.int32), axis=1)


@triton.jit
def _mass_below_reg(kk, e, piv):
    """:func:`_mass_below` on a (ROWS, W, NP) tile (see :func:`_count_ge_reg`)."""
    below = kk[:, :, None] < piv[:, None, :]
    return tl.sum(tl.where(below, e[:, :, None], 0.0), axis=1)


@triton.jit
def _count_ge3(kk, m2, piv):
    """(ROWS, NP, BLOCK) int32 indicators of :func:`_count_ge`, not reduced (the ``ACC`` passes sum them over the
    whole chunk in registers and reduce once)."""
    kk = tl.where(m2, kk, _KEY_MIN)
    return (kk[:, None, :] >= piv[:, :, None]).to(tl.int32)


@triton.jit
def _mass_below3(kk, e, piv):
    """(ROWS, NP, BLOCK) float32 terms of :func:`_mass_below`, not reduced."""
    return tl.where(kk[:, None, :] < piv[:, :, None], e[:, None, :], 0.0)


@triton.jit
def _mass_below(kk, e, piv):
    """(ROWS, NP) float32: per pivot, the sum of ``e`` over keys strictly below it."""
    return tl.sum(_mass_below3(kk, e, piv), axis=2)


@triton.jit
def _reduce_parts(P, par, rows, rmask, B, NCH, ROWS: tl.constexpr, NP: tl.constexpr, NCHB: tl.constexpr,
                  CB: tl.constexpr, IS_INT: tl.constexpr):
    """(ROWS, NP) sum over the chunks of partials ``P[par, row, chunk, :]`` (layout [2, B, NCH, NP]), in a
    fixed order (chunk blocks of CB in sequence, a tree within one): identical in every program."""
    jn = tl.arange(0, NP)
    base = (par * B + rows) * NCH
    if IS_INT:
        acc = tl.zeros([ROWS, NP], dtype=tl.int32)
    else:
        acc = tl.zeros([ROWS, NP], dtype=tl.float32)
    for c0 in tl.static_range(0, NCHB, CB):
        cc = c0 + tl.arange(0, CB)
        msk = rmask[:, None, None] & (cc < NCH)[None, :, None]
        off = (base[:, None, None] + cc[None, :, None]) * NP + jn[None, None, :]
        acc += tl.sum(tl.load(P + off, mask=msk, other=0), axis=1)
    return acc


@triton.jit
def _reduce_chunks(P, rows, rmask, NCH, NCHB: tl.constexpr, IS_MAX: tl.constexpr):
    """(ROWS,) max or sum over the chunks of ``P[row, chunk]`` (layout [B, NCH])."""
    cc = tl.arange(0, NCHB)
    msk = rmask[:, None] & (cc < NCH)[None, :]
    if IS_MAX:
        v = tl.load(P + rows[:, None] * NCH + cc[None, :], mask=msk, other=float("-inf"))
        return tl.max(v, axis=1)
    else:
        v = tl.load(P + rows[:, None] * NCH + cc[None, :], mask=msk, other=0.0)
        return tl.sum(v, axis=1)


@triton.jit(do_not_specialize=["step"])
def _step_kernel(
    X, stride_x, BAN, stride_ban, SEED,
    T_PTR, K_PTR, P_PTR, MINP_PTR,
    PMAX, CNT, MASS, ZP, ST, TK, GV, GI, OUT,
    B, V, NCH, step, t_val, k_val, p_val, omp_val, minp_val,
    T_ROWS: tl.constexpr, K_ROWS: tl.constexpr, P_ROWS: tl.constexpr, MINP_ROWS: tl.constexpr,
    USE_K: tl.constexpr, USE_P: tl.constexpr, USE_MINP: tl.constexpr,
    IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr, TOP_K_FIRST: tl.constexpr,
    PREV: tl.constexpr, CUR: tl.constexpr,
    CHUNK: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, NP: tl.constexpr,
    NCHB: tl.constexpr, CB: tl.constexpr, WIN: tl.constexpr, ACC: tl.constexpr, LANE: tl.constexpr,
):
    """One launch of the sampler, program (row block, chunk); see the module docstring.

    ``WIN`` (no top-k; top-p and/or min-p; launch 1 only): also write each chunk's whole-row Gumbel-max to
    ``GV``/``GI`` and mark every row open (``OUT = -1``); :func:`_chain_kernel` runs the later launches.
    ``ACC``: search passes accumulate the (ROWS, NP, BLOCK) compare terms over the chunk and reduce once.
    ``LANE``: launch 1's max and the draws' argmax are kept per lane over the chunk and reduced once
    (:func:`_lane_best`; the same values and indices as the per-block reductions).

    ``PREV``: what the previous launch left (0: row maxima only, 1: a top-k pass, 2: a top-p pass).
    ``CUR``: what this launch does (0: maxima (+ top-k pass 1), 1: a top-k pass, 2: a top-p pass, 3: draw).
    ``step``: this launch's search-pass number g: it reads ``ST[g-1]`` and partials ``[(g-1) % 2]``, writes
    ``ST[g]`` (chunk 0) and partials ``[g % 2]``. ``ST``: int64 [passes + 2, 2, B] (lo, hi).
    """
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    chunk = tl.program_id(1)
    col0 = chunk * CHUNK
    ar = tl.arange(0, BLOCK)
    lead = rmask & ((tl.zeros([ROWS], dtype=tl.int32) + chunk) == 0)
    par_in = (step + 1) % 2
    par_out = step % 2
    st_in = ST + (step - 1).to(tl.int64) * 2 * B
    st_out = ST + step.to(tl.int64) * 2 * B
    # Per-row parameters (a tensor wins over the scalar).
    if T_ROWS:
        t = tl.load(T_PTR + rows, mask=rmask, other=1.0).to(tl.float32)
    else:
        t = tl.zeros([ROWS], dtype=tl.float32) + t_val
    greedy_t = t <= 0.0
    t_safe = tl.where(greedy_t, 1.0, t)
    if USE_K:
        if K_ROWS:
            k = tl.load(K_PTR + rows, mask=rmask, other=0).to(tl.int64)
        else:
            k = tl.zeros([ROWS], dtype=tl.int64) + k_val

    if CUR == 0:
        # Launch 1: this chunk's max; with top-k, pass 1's counts over the whole key range.
        m = tl.full([ROWS], float("-inf"), tl.float32)
        if USE_K:
            lo = tl.full([ROWS], _KEY_MIN, tl.int64)
            hi = tl.full([ROWS], _KEY_END, tl.int64)
            piv = _pivots(lo, hi, NP)
            cnt = tl.zeros([ROWS, NP], dtype=tl.int32)
        if WIN:
            seed = tl.load(SEED).to(tl.int64)
            best = tl.full([ROWS], float("-inf"), tl.float32)
            best_i = tl.zeros([ROWS], dtype=tl.int64) + col0
            if not LANE:  # placeholders: _fold_draw passes them through
                bv = best
                bi = best_i
        if LANE:
            mv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
            bv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
            bi = tl.zeros([ROWS, BLOCK], dtype=tl.int64) + col0
        for c0 in range(0, CHUNK, BLOCK):
            x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, col0 + c0 + ar, V, IS_PROBS, HAS_BAN)
            y = _scaled(x, t_safe[:, None])
            if LANE:
                mv = tl.maximum(mv, y)
            else:
                m = tl.maximum(m, tl.max(y, axis=1))
            if USE_K:
                cnt += _count_ge(_key(y), m2, piv)
            if WIN:
                score = tl.where(greedy_t[:, None], x, y + _noise(seed, col0 + c0, rows, ROWS, BLOCK))
                score = tl.where(m2, score, float("-inf"))
                bv, bi, best, best_i = _fold_draw(score, col0 + c0, bv, bi, best, best_i, ROWS, BLOCK, LANE)
        if LANE:
            m = tl.max(mv, axis=1)
            if WIN:
                best, best_i = _lane_reduce(bv, bi)
        tl.store(PMAX + rows * NCH + chunk, m, mask=rmask)
        if WIN:
            tl.store(GV + rows * NCH + chunk, best, mask=rmask)
            tl.store(GI + rows * NCH + chunk, best_i, mask=rmask)
            tl.store(OUT + rows, tl.full([ROWS], -1, tl.int64), mask=lead)  # open: :func:`_chain_kernel`
        if USE_K:
            jn = tl.arange(0, NP)
            tl.store(CNT + ((par_out * B + rows[:, None]) * NCH + chunk) * NP + jn[None, :], cnt,
                     mask=rmask[:, None])
            tl.store(st_out + rows, lo, mask=lead)
            tl.store(st_out + B + rows, hi, mask=lead)
    else:
        m = _reduce_chunks(PMAX, rows, rmask, NCH, NCHB, True)
        # Greedy rows: temperature <= 0, a +inf score, or nothing finite (m = -inf).
        greedy = greedy_t | (m == float("inf")) | (m == float("-inf"))
        m_safe = tl.where(greedy, 0.0, m)
        key_max = _key(m_safe).to(tl.int64)
        if USE_P:
            p, omp = _row_top_p(P_PTR, rows, rmask, p_val, omp_val, P_ROWS, ROWS)
            p_on = (p < 1.0) & (~greedy)
        mp = tl.zeros([ROWS], dtype=tl.float32)
        if USE_MINP:
            mp = _row_min_p(MINP_PTR, rows, rmask, minp_val, MINP_ROWS, ROWS)

        # Finish the previous pass: the interval it searched, narrowed by the chunk-summed partials.
        tk = tl.full([ROWS], _KEY_MIN, tl.int64)
        if PREV == 1:
            lo = tl.load(st_in + rows, mask=rmask, other=_KEY_MIN)
            hi = tl.load(st_in + B + rows, mask=rmask, other=_KEY_MIN + 1)
            piv = _pivots(lo, hi, NP)
            cnt = _reduce_parts(CNT, par_in, rows, rmask, B, NCH, ROWS, NP, NCHB, CB, True)
            lo, hi = _narrow(lo, hi, piv, cnt.to(tl.int64) >= k[:, None])
            k_on = (k > 0) & (k < V) & (~greedy)
            lo = tl.where(k_on, lo, _KEY_MIN)
            hi = tl.where(k_on, hi, _KEY_MIN + 1)
            tk = lo
        if PREV == 2:
            lo = tl.load(st_in + rows, mask=rmask, other=_KEY_MIN)
            hi = tl.load(st_in + B + rows, mask=rmask, other=_KEY_MIN + 1)
            piv = _pivots(lo, hi, NP)
            mass = _reduce_parts(MASS, par_in, rows, rmask, B, NCH, ROWS, NP, NCHB, CB, False)
            thr = omp * _reduce_chunks(ZP, rows, rmask, NCH, NCHB, False)
            lo, hi = _narrow(lo, hi, piv, mass <= thr[:, None])
            tk = tl.load(TK + rows, mask=rmask, other=_KEY_MIN)

        if CUR == 1 or CUR == 2:
            if CUR == 2:
                if TOP_K_FIRST:
                    base = tk
                else:
                    base = tl.full([ROWS], _KEY_MIN, tl.int64)
                if PREV != 2:
                    # First top-p pass: record top-k's threshold, start from [base, key_max + 1).
                    tl.store(TK + rows, tk, mask=lead)
                    lo = base
                    hi = tl.where(p_on & (p > 0.0), key_max + 1, lo + 1)
                    z = tl.zeros([ROWS], dtype=tl.float32)
                mass = tl.zeros([ROWS, NP], dtype=tl.float32)
            else:
                cnt = tl.zeros([ROWS, NP], dtype=tl.int32)
            tl.store(st_out + rows, lo, mask=lead)
            tl.store(st_out + B + rows, hi, mask=lead)
            piv = _pivots(lo, hi, NP)
            # a top-p pass after the first skips the chunk when none of its rows is still searching
            n_run = CHUNK
            if CUR == 2 and PREV == 2:
                n_run = CHUNK * (tl.max((rmask & ((hi - lo) > 1)).to(tl.int32), axis=0) > 0).to(tl.int32)
            if ACC:
                if CUR == 1:
                    cnt3 = tl.zeros([ROWS, NP, BLOCK], dtype=tl.int32)
                else:
                    mass3 = tl.zeros([ROWS, NP, BLOCK], dtype=tl.float32)
                    if PREV != 2:
                        z2 = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
            for c0 in range(0, n_run, BLOCK):
                x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, col0 + c0 + ar, V, IS_PROBS, HAS_BAN)
                y = _scaled(x, t_safe[:, None])
                kk = _key(y)
                if CUR == 1:
                    if ACC:
                        cnt3 += _count_ge3(kk, m2, piv)
                    else:
                        cnt += _count_ge(kk, m2, piv)
                else:
                    e = tl.where(kk.to(tl.int64) >= base[:, None], tl.exp(y - m_safe[:, None]), 0.0)
                    if ACC:
                        mass3 += _mass_below3(kk, e, piv)
                        if PREV != 2:
                            z2 += e
                    else:
                        mass += _mass_below(kk, e, piv)
                        if PREV != 2:
                            z += tl.sum(e, axis=1)
            if ACC:
                if CUR == 1:
                    cnt = tl.sum(cnt3, axis=2)
                else:
                    mass = tl.sum(mass3, axis=2)
                    if PREV != 2:
                        z = tl.sum(z2, axis=1)
            jn = tl.arange(0, NP)
            poff = ((par_out * B + rows[:, None]) * NCH + chunk) * NP + jn[None, :]
            if CUR == 1:
                tl.store(CNT + poff, cnt, mask=rmask[:, None])
            else:
                tl.store(MASS + poff, mass, mask=rmask[:, None])
                if PREV != 2:
                    tl.store(ZP + rows * NCH + chunk, z, mask=rmask)

        if CUR == 3:
            # Thresholds, then this chunk's Gumbel-max (greedy rows: argmax of the raw masked logits).
            tp = tl.full([ROWS], _KEY_MIN, tl.int64)
            if PREV == 2:
                # p <= 0: only the largest token(s) survive.
                tp = tl.where(p_on & (p <= 0.0), key_max, tl.where(p_on, lo, _KEY_MIN))
            keep_from = tl.maximum(tk, tp)
            seed = tl.load(SEED).to(tl.int64)
            best = tl.full([ROWS], float("-inf"), tl.float32)
            best_i = tl.zeros([ROWS], dtype=tl.int64) + col0
            todo = tl.max(rmask.to(tl.int32), axis=0) > 0
            if LANE:
                bv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
                bi = tl.zeros([ROWS, BLOCK], dtype=tl.int64) + col0
            else:  # placeholders: _fold_draw passes them through
                bv = best
                bi = best_i
            for c0 in range(0, CHUNK * todo.to(tl.int32), BLOCK):
                cols = col0 + c0 + ar
                x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS, HAS_BAN)
                y = _scaled(x, t_safe[:, None])
                keep = _key(y).to(tl.int64) >= keep_from[:, None]
                if USE_MINP:
                    keep = keep & ~(tl.exp(y - m_safe[:, None]) < mp[:, None])
                g = _noise(seed, col0 + c0, rows, ROWS, BLOCK)
                score = tl.where(keep & m2, y + g, float("-inf"))
                score = tl.where(greedy[:, None], x, score)
                score = tl.where(m2, score, float("-inf"))
                bv, bi, best, best_i = _fold_draw(score, col0 + c0, bv, bi, best, best_i, ROWS, BLOCK, LANE)
            if LANE:
                best, best_i = _lane_reduce(bv, bi)
            tl.store(GV + rows * NCH + chunk, best, mask=rmask)
            tl.store(GI + rows * NCH + chunk, best_i, mask=rmask)


@triton.jit
def _winner_pivot(lo, hi, wk, NP: tl.constexpr):
    """(ROWS, NP) int32 pivots of a chain pass over [lo, hi): where the candidate's key + 1 lies strictly inside
    (only in the first top-p pass: afterwards the interval lies on one side of it), ``NP - 1`` pivots at
    ``lo + d*j // NP`` plus that one, else :func:`_pivots`'s ``NP``. Either way the narrowed interval is at most
    ``ceil(d / NP)`` wide (:func:`winner_passes`); replacing the last of ``NP`` evenly spaced pivots instead could
    leave ``2d / (NP + 1)``. The narrowing needs no sorted pivots: the computed mass below a pivot is monotone
    in the pivot."""
    w1 = wk + 1
    inside = (w1 > lo) & (w1 < hi)
    j = tl.arange(0, NP).to(tl.int64) + 1
    # NP-ary pivots by an unsigned constant division (d*j >= 0) beside _pivots' signed one: LLVM folds a select
    # of two signed divisions of one dividend into one division by the selected divisor, a 64-bit division
    # subroutine (div.s64 in the sm_90 PTX) that cost ~10 us per call at V=32000 B=32 / 64 on the H200
    # (2026-12-01; tests/test_sampling_chain.py checks the PTX).
    even = (lo[:, None] + (((hi - lo)[:, None] * j[None, :]).to(tl.uint64) // NP).to(tl.int64)).to(tl.int32)
    piv = tl.where(inside[:, None], even, _pivots(lo, hi, NP))
    last = (j == NP)[None, :]
    return tl.where(last & inside[:, None], w1.to(tl.int32)[:, None], piv)


@triton.jit
def _winner_filters(m, greedy_t, P_PTR, MINP_PTR, rows, rmask, p_val, omp_val, minp_val, P_ROWS: tl.constexpr,
                    MINP_ROWS: tl.constexpr, USE_P: tl.constexpr, USE_MINP: tl.constexpr, ROWS: tl.constexpr):
    """Per row, given the row max ``m`` of ``x / T``: ``greedy`` (temperature <= 0, a +inf score or nothing
    finite), ``m_safe``, ``key_max``, min-p, ``1 - p``, ``srch`` (top-p needs its threshold searched: 0 < p < 1)
    and the search's first lower bound (p <= 0 keeps the largest token(s): key_max; top-p off: the smallest
    key). Shared by the chain and :mod:`.sampling_rows`."""
    greedy = greedy_t | (m == float("inf")) | (m == float("-inf"))
    m_safe = tl.where(greedy, 0.0, m)
    key_max = _key(m_safe).to(tl.int64)
    mp = tl.zeros([ROWS], dtype=tl.float32)
    if USE_MINP:
        mp = _row_min_p(MINP_PTR, rows, rmask, minp_val, MINP_ROWS, ROWS)
    if USE_P:
        p, omp = _row_top_p(P_PTR, rows, rmask, p_val, omp_val, P_ROWS, ROWS)
        p_on = (p < 1.0) & (~greedy)
        srch = p_on & (p > 0.0)
    else:
        omp = tl.zeros([ROWS], dtype=tl.float32)
        p_on = rows < 0
        srch = p_on
    lo = tl.where(p_on & (~srch), key_max, _KEY_MIN)
    return greedy, m_safe, key_max, mp, omp, srch, lo


_NEED = tl.constexpr(-(2**40))  # candidate state: "drawn by this launch, in its GV/GI partials"


@triton.jit(do_not_specialize=["step"])
def _chain_kernel(
    X, stride_x, BAN, stride_ban, SEED, T_PTR, P_PTR, MINP_PTR,
    PMAX, MASS, ZP, CS, GV, GI, OUT,
    B, V, NCH, MSTRIDE, step, t_val, p_val, omp_val, minp_val,
    T_ROWS: tl.constexpr, P_ROWS: tl.constexpr, MINP_ROWS: tl.constexpr,
    USE_P: tl.constexpr, USE_MINP: tl.constexpr, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr,
    PREV: tl.constexpr, CUR: tl.constexpr,
    CHUNK: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, NP: tl.constexpr, PNP: tl.constexpr,
    NCHB: tl.constexpr, CB: tl.constexpr, ACC: tl.constexpr, LANE: tl.constexpr, DRAW: tl.constexpr,
):
    """Launch ``step`` >= 2 of the restricted-winner chain (no top-k: top-p and/or min-p; module docstring),
    program (row block, chunk), after :func:`_step_kernel`'s launch 1 (``WIN``: maxima, whole-row winner
    partials in ``GV/GI[1]``, ``OUT = -1``).

    Per row: the threshold interval [lo, hi) of the top-p search (t inside) and a candidate ``c`` = the
    Gumbel-max over ``{key >= lo'} & min-p`` for an earlier lower bound lo' <= t. ``c`` with ``key(c) >= t``
    is the draw's answer (the argmax over a superset of the kept set that lies in it; lowest index among ties
    in both), so the row is *closed*: the lead program (chunk 0) writes ``OUT[row] = c``. ``key(c) < lo``
    rejects ``c``; this launch draws the next candidate over ``{key >= lo}`` (partials ``GV/GI[step % 2]``).
    Otherwise this pass puts a pivot at ``key(c) + 1``, so the next launch decides. Programs whose rows are
    all closed return after one load of ``OUT``; a chunk streams only while one of its rows searches or draws.

    ``PREV``: 0 (the previous launch was launch 1) or 2 (a chain pass). ``CUR``: 2 (a search pass: masses at
    the pivots, ``Z`` in the first) or 3 (the last launch: the interval is one key, so a rejected row's new
    candidate is exact; with one chunk it goes straight to ``OUT``, else :func:`_pick_kernel` picks).
    ``CS``: int64 [launches + 1, 4, B] (lo, hi, candidate key or ``_NEED``, candidate token) per launch.
    ``NP``: this pass's pivots, ``PNP``: the previous pass's (:func:`chain_schedule`); ``CB``: the chunk step of
    the reduction of the previous pass's partials (:func:`chain_pass_shape`). ``MASS`` holds two halves of
    ``MSTRIDE`` (>= B * NCH * max NP) floats, [launch % 2], each a [B, NCH, NP] block of its writer's NP: a pass
    of 64 pivots must not overwrite the half of 8-pivot partials the other programs are still reading.
    ``DRAW`` off (host: launch 2 with top-p, no min-p, no per-row p, scalar p > 0): no row can reject
    launch 1's winner here (lo is the smallest key), so the draw code is compiled out. ``LANE``: as
    :func:`_step_kernel`'s.
    """
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    chunk = tl.program_id(1)
    col0 = chunk * CHUNK
    ar = tl.arange(0, BLOCK)
    lead = (tl.zeros([ROWS], dtype=tl.int32) + chunk) == 0
    par_in = (step + 1) % 2
    par_out = step % 2
    live = rmask & (tl.load(OUT + rows, mask=rmask, other=0) < 0)
    if tl.max(live.to(tl.int32), axis=0) > 0:
        t = _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS, ROWS)
        greedy_t = t <= 0.0
        t_safe = tl.where(greedy_t, 1.0, t)
        m = _reduce_chunks(PMAX, rows, live, NCH, NCHB, True)
        greedy, m_safe, key_max, mp, omp, srch0, lo0 = _winner_filters(
            m, greedy_t, P_PTR, MINP_PTR, rows, rmask, p_val, omp_val, minp_val, P_ROWS, MINP_ROWS, USE_P, USE_MINP,
            ROWS)
        if PREV == 0:
            lo = lo0
            hi = tl.where(srch0, key_max + 1, lo + 1)
            ck = tl.full([ROWS], _NEED, tl.int64)
            ctok = tl.zeros([ROWS], dtype=tl.int64)
        else:
            st_in = CS + (step - 1).to(tl.int64) * 4 * B
            lo = tl.load(st_in + rows, mask=live, other=_KEY_MIN)
            hi = tl.load(st_in + B + rows, mask=live, other=_KEY_MIN + 1)
            ck = tl.load(st_in + 2 * B + rows, mask=live, other=_NEED)
            ctok = tl.load(st_in + 3 * B + rows, mask=live, other=0)
            if USE_P:  # the previous pass's pivots (PNP of them) and its per-chunk masses
                piv = _winner_pivot(lo, hi, ck, PNP)
                mass = _reduce_parts(MASS + par_in * MSTRIDE, 0, rows, live, B, NCH, ROWS, PNP, NCHB, CB, False)
                thr = omp * _reduce_chunks(ZP, rows, live, NCH, NCHB, False)
                lo, hi = _narrow(lo, hi, piv, mass <= thr[:, None])
        # The candidate the previous launch drew (its best chunk, the first among equals, as the pick).
        need = live & (ck == _NEED)
        cc = tl.arange(0, NCHB)
        pbase = (par_in * B + rows) * NCH
        gv = tl.load(GV + pbase[:, None] + cc[None, :], mask=need[:, None] & (cc < NCH)[None, :],
                     other=float("-inf"))
        tok = tl.load(GI + pbase + tl.argmax(gv, axis=1).to(tl.int64), mask=need, other=0)
        yw = _scaled(_load_at(X, rows * stride_x + tok, BAN, rows * stride_ban + tok, need, IS_PROBS, HAS_BAN), t_safe)
        ok = need & (~greedy)
        if USE_MINP and PREV == 0:
            ok = ok & ~(tl.exp(yw - m_safe) < mp)  # launch 1's winner ignored min-p; later ones are inside it
        ck = tl.where(need, tl.where(ok, _key(yw).to(tl.int64), _KEY_MIN - 1), ck)
        ctok = tl.where(need, tok, ctok)
        # greedy rows (launch 2 only) take launch 1's argmax of the raw logits
        kept = live & (greedy | ((ck >= lo) & (hi <= ck + 1)))
        tl.store(OUT + rows, ctok, mask=kept & lead)
        rej = live & (~kept) & (ck < lo)
        ck = tl.where(rej, _NEED, ck)
        srch = rows < 0
        if CUR == 2:
            st_out = CS + step.to(tl.int64) * 4 * B
            wmask = live & lead
            tl.store(st_out + rows, lo, mask=wmask)
            tl.store(st_out + B + rows, hi, mask=wmask)
            tl.store(st_out + 2 * B + rows, ck, mask=wmask)
            tl.store(st_out + 3 * B + rows, ctok, mask=wmask)
            srch = live & (~kept) & ((hi - lo) > 1)
        n_srch = tl.max(srch.to(tl.int32), axis=0)
        n_rej = tl.max(rej.to(tl.int32), axis=0) * DRAW
        piv = _winner_pivot(lo, hi, ck, NP)
        seed = tl.load(SEED).to(tl.int64)
        best = tl.full([ROWS], float("-inf"), tl.float32)
        best_i = tl.zeros([ROWS], dtype=tl.int64) + col0
        if ACC:
            mass3 = tl.zeros([ROWS, NP, BLOCK], dtype=tl.float32)
            z2 = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
        mass = tl.zeros([ROWS, NP], dtype=tl.float32)
        z = tl.zeros([ROWS], dtype=tl.float32)
        if DRAW and LANE:
            bv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
            bi = tl.zeros([ROWS, BLOCK], dtype=tl.int64) + col0
        else:  # placeholders: _fold_draw passes them through
            bv = best
            bi = best_i
        for c0 in range(0, CHUNK * tl.maximum(n_srch, n_rej), BLOCK):
            cols = col0 + c0 + ar
            x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS, HAS_BAN)
            y = _scaled(x, t_safe[:, None])
            kk = _key(y)
            if CUR == 2:
                if n_srch > 0:
                    # top-p alone: every key >= the (absent) top-k threshold, as _step_kernel's passes
                    e = tl.exp(y - m_safe[:, None])
                    if ACC:
                        mass3 += _mass_below3(kk, e, piv)
                        if PREV == 0:
                            z2 += e
                    else:
                        mass += _mass_below(kk, e, piv)
                        if PREV == 0:
                            z += tl.sum(e, axis=1)
            if DRAW:
                if n_rej > 0:
                    keep = rej[:, None] & m2 & (kk.to(tl.int64) >= lo[:, None])
                    if USE_MINP:
                        keep = keep & ~(tl.exp(y - m_safe[:, None]) < mp[:, None])
                    score = tl.where(keep, y + _noise(seed, col0 + c0, rows, ROWS, BLOCK), float("-inf"))
                    bv, bi, best, best_i = _fold_draw(score, col0 + c0, bv, bi, best, best_i, ROWS, BLOCK, LANE)
        if CUR == 2:
            if ACC:
                mass = tl.sum(mass3, axis=2)
                if PREV == 0:
                    z = tl.sum(z2, axis=1)
            jn = tl.arange(0, NP)
            poff = par_out * MSTRIDE + (rows[:, None] * NCH + chunk) * NP + jn[None, :]
            tl.store(MASS + poff, mass, mask=srch[:, None])
            if PREV == 0:
                tl.store(ZP + rows * NCH + chunk, z, mask=live)
        if DRAW:
            if LANE:
                best, best_i = _lane_reduce(bv, bi)
            obase = (par_out * B + rows) * NCH + chunk
            tl.store(GV + obase, best, mask=rej)
            tl.store(GI + obase, best_i, mask=rej)
            if CUR == 3 and NCHB == 1:
                tl.store(OUT + rows, best_i, mask=rej)


@triton.jit
def _pick_kernel(GV, GI, OUT, B, NCH, ROWS: tl.constexpr, NCHB: tl.constexpr, OPEN: tl.constexpr):
    """Per row, the token of the best chunk (the first chunk among equal values: the lowest index). ``OPEN``
    (the chain): only rows still open (``OUT < 0``); closed rows keep their token."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    if OPEN:
        rmask = rmask & (tl.load(OUT + rows, mask=rmask, other=0) < 0)
    cc = tl.arange(0, NCHB)
    msk = rmask[:, None] & (cc < NCH)[None, :]
    v = tl.load(GV + rows[:, None] * NCH + cc[None, :], mask=msk, other=float("-inf"))
    c = tl.argmax(v, axis=1).to(tl.int64)
    tok = tl.load(GI + rows * NCH + c, mask=rmask, other=0)
    tl.store(OUT + rows, tok, mask=rmask)


# ---------------------------------------------------------------------------------------------------------
# Top-k fast path (issue 14): two launches, the logits read once in full.
# ---------------------------------------------------------------------------------------------------------


def fast_config(b: int, v: int, interp: bool | None = None) -> dict[str, int]:
    """Launch shape of the two-launch top-k path for a (b, v) batch (``interp``: the interpreter's shapes;
    None: whether Triton interprets now).

    Returns:
        dict with ``G`` (columns per group), ``NG`` (groups per row), ``GCAP`` (candidate groups gathered per
        row), ``CG`` (groups per program of launch 1), ``SBG`` (groups per tile of launch 1), ``ROWS1`` /
        ``ROWS`` (rows per program of launch 1 / 2), ``ET`` (register tile of group maxima, next_pow2(NG)),
        ``CT`` (register tile of candidate columns, GCAP * G), ``FB`` (tile of the whole-row fallback),
        ``NP`` / ``NPASS`` (pivots per search pass / passes that shrink the 2^32 key range to width 1),
        ``CC`` (compact candidate slots, :data:`CAND_CAP` capped at ``CT``; 0 = pivot searches only), ``CJ``
        (width of the all-pairs pieces, :data:`CAND_TILE`), ``NPB``
        (pivots per pass of the bound search), ``GEO`` (geometric first bound pass), ``num_warps1`` /
        ``num_warps``.

    GPU: ``G`` = 32 columns up to V = 131072, else 64 (``ET`` <= 4096); ``GCAP`` = 64 groups (``CT`` 2048 /
    4096); launch 1 aims at :data:`TARGET_PROGRAMS` programs of ``CG`` in [32, 512] groups (B=1, V=128256:
    126 programs of 1024 columns; B=64: 512 programs of 16384); launch 2 is one program per row, 16 warps
    (16 * 64 = 1024 threads on ROCm) holding both tiles in registers. Interpreter: row blocks, tiles up to
    2^20 elements.
    """
    from . import interpreting

    interp = interpreting() if interp is None else interp
    g = INTERP_GROUP if interp else (GROUP if v <= GROUP_WIDE_VOCAB else 2 * GROUP)
    ng = triton.cdiv(v, g)
    ngb = triton.next_power_of_2(ng)
    gcap = min(GROUP_CAP, ngb)
    ct = gcap * g
    if interp:
        npiv = INTERP_NPIV
        cg = sbg = ngb
        rows1 = max(1, min(INTERP_MAX_ROWS, INTERP_COMPARE_TILE // (ngb * g), triton.next_power_of_2(b)))
        rows = max(1, min(INTERP_MAX_ROWS, INTERP_COMPARE_TILE // (max(ngb, ct) * npiv),
                          triton.next_power_of_2(b)))
        fb = ct
    else:
        npiv = FAST_NPIV if ct <= 2048 else FAST_NPIV_WIDE
        cg = min(max(triton.next_power_of_2(triton.cdiv(b * ng, TARGET_PROGRAMS)), 32), 512, ngb)
        sbg = min(cg, FAST_TILE // g)
        rows1 = rows = 1
        fb = FAST_TILE
    cc = min(triton.next_power_of_2(CAND_CAP), ct) if CAND_CAP else 0
    if interp and cc:
        rows = max(1, min(rows, INTERP_COMPARE_TILE // (cc * cc)))
    npb = FAST_NPIV_BOUND or npiv
    wide = v > GROUP_WIDE_VOCAB and not interp
    cj = min((CAND_TILE_WIDE if wide else CAND_TILE) or cc, cc) if cc else 1
    return dict(G=g, NG=ng, GCAP=gcap, CG=cg, SBG=sbg, ROWS1=rows1, ROWS=rows, ET=ngb, CT=ct, FB=fb, NP=npiv,
                NPASS=search_passes(npiv), CC=cc, CJ=cj, NPB=npb, GEO=bool(FAST_GEO), num_warps1=4,
                num_warps=NUM_WARPS2_WIDE if wide else NUM_WARPS2)


def fast_path_ok(b: int, v: int, top_k: torch.Tensor | None, top_k_value: int, use_p: bool,
                 top_k_first: bool) -> bool:
    """Host-side choice (shapes and flags only, capture-safe): a scalar ``0 < k < V``, ``k <= TOPK_CAP``, and
    top-p (if on) applied after top-k."""
    return (FAST_TOPK and top_k is None and 0 < top_k_value < v and top_k_value <= TOPK_CAP
            and (top_k_first or not use_p))


@triton.jit
def _load_at(X, xoff, BAN, boff, msk, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr):
    """float32 logits at element offsets ``xoff`` (any shape): -inf where ``msk`` is false, NaN -> -inf, log
    of probabilities, banned -> -inf."""
    x = tl.load(X + xoff, mask=msk, other=float("-inf")).to(tl.float32)
    if IS_PROBS:
        x = tl.log(x)
    x = tl.where(x != x, float("-inf"), x)
    if HAS_BAN:
        bn = tl.load(BAN + boff, mask=msk, other=0)
        x = tl.where(bn != 0, float("-inf"), x)
    return x


@triton.jit
def _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS: tl.constexpr, ROWS: tl.constexpr):
    """(ROWS,) temperature (a tensor wins over the scalar)."""
    if T_ROWS:
        t = tl.load(T_PTR + rows, mask=rmask, other=1.0).to(tl.float32)
    else:
        t = tl.zeros([ROWS], dtype=tl.float32) + t_val
    return t


@triton.jit
def _group_max_kernel(X, stride_x, BAN, stride_ban, T_PTR, GM, B, V, NG, t_val,
                      T_ROWS: tl.constexpr, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr,
                      G: tl.constexpr, CG: tl.constexpr, SBG: tl.constexpr, ROWS: tl.constexpr):
    """Launch 1 of the top-k path, program (row block, group block): ``GM[row, g] = max(x / T)`` over the
    ``G`` columns of group ``g`` (the only full read of the logits)."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    t = _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS, ROWS)
    t_safe = tl.where(t <= 0.0, 1.0, t)
    g0 = tl.program_id(1).to(tl.int64) * CG
    ag = tl.arange(0, SBG)
    aj = tl.arange(0, G)
    for s0 in tl.static_range(0, CG, SBG):
        gi = g0 + s0 + ag
        cols = gi[None, :, None] * G + aj[None, None, :]
        msk = rmask[:, None, None] & (cols < V)
        x = _load_at(X, rows[:, None, None] * stride_x + cols, BAN, rows[:, None, None] * stride_ban + cols, msk,
                     IS_PROBS, HAS_BAN)
        gm = tl.max(_scaled(x, t_safe[:, None, None]), axis=2)
        tl.store(GM + rows[:, None] * NG + gi[None, :], gm, mask=rmask[:, None] & (gi < NG)[None, :])


@triton.jit
def _cand(CAND, rows, q, full, n_keep, V, G: tl.constexpr, GCAP: tl.constexpr):
    """(ROWS, FB) columns and validity of candidate positions ``q``: the whole row when ``full``, else
    position ``q`` = column ``q % G`` of the ``q // G``-th gathered group (ascending columns)."""
    slot = q // G
    sel = (slot < n_keep[:, None]) & (~full[:, None])
    gid = tl.load(CAND + rows[:, None] * GCAP + slot, mask=sel, other=0).to(tl.int64)
    cols = tl.where(full[:, None], q.to(tl.int64), gid * G + (q % G))
    valid = tl.where(full[:, None], q < V, sel & (cols < V))
    return cols, valid


@triton.jit
def _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q, V, IS_PROBS: tl.constexpr,
              HAS_BAN: tl.constexpr, G: tl.constexpr, GCAP: tl.constexpr):
    """One tile of :func:`_topk_slow`'s whole-row loop: columns ``q``, their validity (``full`` rows only) and
    the scaled logits ``x / T`` there."""
    cols, valid = _cand(CAND, rows, q, full, n_keep, V, G, GCAP)
    valid = valid & rmask[:, None] & full[:, None]
    return cols, valid, _scaled(_load_at(X, xrow + cols, BAN, brow + cols, valid, IS_PROBS, HAS_BAN), t_safe[:, None])


@triton.jit
def _topk_slow(X, stride_x, BAN, stride_ban, seed, CAND, rows, rmask, full, t_safe, m_safe, key_max, k, t0,
               p, omp, p_on, mp, V, USE_P: tl.constexpr, USE_MINP: tl.constexpr, IS_PROBS: tl.constexpr,
               HAS_BAN: tl.constexpr, G: tl.constexpr, GCAP: tl.constexpr, FB: tl.constexpr, NP: tl.constexpr,
               NPASS: tl.constexpr, ROWS: tl.constexpr):
    """Whole-row fallback of launch 2 for the ``full`` rows (more than GCAP groups reach T0: ties): the same
    searches and draw as the register path, streaming the row in FB-column tiles. Returns (ROWS,) tokens."""
    n_keep = tl.zeros([ROWS], dtype=tl.int32)
    n_items = V
    qa = tl.arange(0, FB)[None, :]
    xrow = rows[:, None] * stride_x
    brow = rows[:, None] * stride_ban
    lo = t0
    hi = key_max + 1
    for _it in range(NPASS):  # a loop, not unrolled: compile time
        piv = _pivots(lo, hi, NP)
        cnt = tl.zeros([ROWS, NP], dtype=tl.int32)
        for q0 in range(0, n_items, FB):
            cols, valid, y = _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q0 + qa, V,
                                        IS_PROBS, HAS_BAN, G, GCAP)
            cnt += _count_ge_reg(_key(y), valid, piv)
        lo, hi = _narrow(lo, hi, piv, cnt.to(tl.int64) >= k[:, None])
    tk = lo
    tp = tl.full([ROWS], _KEY_MIN, tl.int64)
    if USE_P:
        z = tl.zeros([ROWS], dtype=tl.float32)
        for q0 in range(0, n_items, FB):
            cols, valid, y = _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q0 + qa, V,
                                        IS_PROBS, HAS_BAN, G, GCAP)
            kk = _key(y).to(tl.int64)
            z += tl.sum(tl.where(valid & (kk >= tk[:, None]), tl.exp(y - m_safe[:, None]), 0.0), axis=1)
        thr = omp * z
        lo = tk
        hi = tl.where(p_on & (p > 0.0), key_max + 1, lo + 1)
        for _it in range(NPASS):  # a loop, not unrolled: compile time
            piv = _pivots(lo, hi, NP)
            mass = tl.zeros([ROWS, NP], dtype=tl.float32)
            for q0 in range(0, n_items, FB):
                cols, valid, y = _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q0 + qa, V,
                                            IS_PROBS, HAS_BAN, G, GCAP)
                kk = _key(y)
                e = tl.where(valid & (kk.to(tl.int64) >= tk[:, None]), tl.exp(y - m_safe[:, None]), 0.0)
                mass += _mass_below_reg(kk, e, piv)
            lo, hi = _narrow(lo, hi, piv, mass <= thr[:, None])
        tp = tl.where(p_on & (p <= 0.0), key_max, tl.where(p_on, lo, _KEY_MIN))
    keep_from = tl.maximum(tk, tp)
    best = tl.full([ROWS], float("-inf"), tl.float32)
    best_i = tl.zeros([ROWS], dtype=tl.int64)
    for q0 in range(0, n_items, FB):
        cols, valid, y = _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q0 + qa, V,
                                    IS_PROBS, HAS_BAN, G, GCAP)
        blk, blk_i = _gumbel_best(y, cols, valid, _key(y).to(tl.int64) >= keep_from[:, None], rows, m_safe, mp,
                                  seed, V, USE_MINP, ROWS, FB)
        best, best_i = _fold_best(blk, blk_i, best, best_i)
    return best_i


@triton.jit
def _gumbel_best(y, cols, valid, keep, rows, m_safe, mp, seed, V, USE_MINP: tl.constexpr, ROWS: tl.constexpr,
                 W: tl.constexpr):
    """Per row, the best Gumbel-perturbed kept logit of a (ROWS, W) tile and its column (lowest among ties);
    noise :func:`_noise_at` (lane column % 4 of Philox(seed; counter (column // 4, row))), as the general path."""
    keep = keep & valid
    if USE_MINP:
        keep = keep & ~(tl.exp(y - m_safe[:, None]) < mp[:, None])
    score = tl.where(keep, y + _noise_at(seed, cols, rows, ROWS, W), float("-inf"))
    blk = tl.max(score, axis=1)
    blk_i = tl.min(tl.where(keep & (score == blk[:, None]), cols, V), axis=1)
    return blk, blk_i


@triton.jit
def _gather(X, stride_x, BAN, stride_ban, CAND, rows, rmask, n_keep, t_safe, V, IS_PROBS: tl.constexpr,
            HAS_BAN: tl.constexpr, G: tl.constexpr, GCAP: tl.constexpr, CT: tl.constexpr):
    """Launch 2's (ROWS, CT) candidates: the columns of the row's ``n_keep`` gathered groups (``CAND``), their
    validity, scaled logits ``x / T`` and int32 keys."""
    cols, valid = _cand(CAND, rows, tl.arange(0, CT)[None, :], rows < 0, n_keep, V, G, GCAP)
    valid = valid & rmask[:, None]
    y = _scaled(_load_at(X, rows[:, None] * stride_x + cols, BAN, rows[:, None] * stride_ban + cols, valid,
                         IS_PROBS, HAS_BAN), t_safe[:, None])
    return cols, valid, y, _key(y)


@triton.jit
def _bound_pass(ek, em, piv, k, lo, hi, c_lo, active, GCAP: tl.constexpr):
    """One pass of launch 2's bound search over the group-max keys ``ek`` (ROWS, ET) with pivots ``piv``
    (ROWS, NPB, any order): rows still ``active`` raise ``lo`` to the largest pivot with at least k groups
    reaching it (``c_lo``: that count) and lower ``hi``; a row stops once at most GCAP groups reach ``lo``."""
    cnt = _count_ge_reg(ek, em, piv).to(tl.int64)
    ok = cnt >= k[:, None]
    c_new = tl.min(tl.where(ok, cnt, c_lo[:, None]), axis=1)  # count at the largest pivot kept (decreasing)
    lo2, hi2 = _narrow(lo, hi, piv, ok)
    lo = tl.where(active, lo2, lo)
    hi = tl.where(active, hi2, hi)
    c_lo = tl.where(active, c_new, c_lo)
    return lo, hi, c_lo, active & ((hi - lo) > 1) & (c_lo > GCAP)


@triton.jit
def _topk_search_draw(y, cols, valid, kk, rows, rmask, t0, key_max, m_safe, k, p, omp, p_on, mp, seed, V,
                      USE_P: tl.constexpr, USE_MINP: tl.constexpr, NP: tl.constexpr, ROWS: tl.constexpr,
                      CT: tl.constexpr):
    """Launch 2's tail over the (ROWS, CT) gathered candidates by pivot searches: the exact k-th key from
    [T0, max] (ties kept), HF top-p on the renormalised top-k set (the largest key whose strictly-lower mass
    is <= (1 - p) * Z; p <= 0 keeps the largest token(s)), min-p, the Gumbel-max draw. Returns (ROWS,) int64
    tokens. Used where more than ``CC`` candidates reach T0 (ties), or everywhere with ``CC = 0``."""
    lo = t0
    hi = key_max + 1
    while tl.max((rmask & ((hi - lo) > 1)).to(tl.int32), axis=0) > 0:  # until every row's interval is one key
        piv = _pivots(lo, hi, NP)
        lo, hi = _narrow(lo, hi, piv, _count_ge_reg(kk, valid, piv).to(tl.int64) >= k[:, None])
    tk = lo
    tp = tl.full([ROWS], _KEY_MIN, tl.int64)
    if USE_P:
        e = tl.where(valid & (kk.to(tl.int64) >= tk[:, None]), tl.exp(y - m_safe[:, None]), 0.0)
        thr = omp * tl.sum(e, axis=1)
        lo = tk
        hi = tl.where(p_on & (p > 0.0), key_max + 1, lo + 1)
        while tl.max((rmask & ((hi - lo) > 1)).to(tl.int32), axis=0) > 0:
            piv = _pivots(lo, hi, NP)
            lo, hi = _narrow(lo, hi, piv, _mass_below_reg(kk, e, piv) <= thr[:, None])
        tp = tl.where(p_on & (p <= 0.0), key_max, tl.where(p_on, lo, _KEY_MIN))
    keep_from = tl.maximum(tk, tp)
    _best, best_i = _gumbel_best(y, cols, valid, kk.to(tl.int64) >= keep_from[:, None], rows, m_safe, mp, seed, V,
                                 USE_MINP, ROWS, CT)
    return best_i


@triton.jit
def _cbuf_piece(CBUF, rows, rmask, n_c, j0, CC: tl.constexpr, CJ: tl.constexpr):
    """(ROWS, CJ) int32 keys (``_KEY_MIN`` past the row's ``n_c`` packed candidates) and float32 values of
    slots ``j0 .. j0 + CJ`` of the compact scratch row (re-read: L1-resident, written by this program)."""
    ja = j0 + tl.arange(0, CJ)
    vj = rmask[:, None] & (ja[None, :] < n_c[:, None])
    kj = tl.where(vj, (tl.load(CBUF + rows[:, None] * CC + ja[None, :], mask=vj, other=0) >> 32).to(tl.int32),
                  _KEY_MIN)
    return kj, _unkey(kj)


@triton.jit
def _topk_compact_draw(CBUF, y, cols, valid, kk, rows, rmask, t0, key_max, m_safe, k, p, omp, p_on, mp, seed, V,
                       USE_P: tl.constexpr, USE_MINP: tl.constexpr, ROWS: tl.constexpr, CT: tl.constexpr,
                       CC: tl.constexpr, CJ: tl.constexpr):
    """Launch 2's tail by compaction (:data:`CAND_CAP`): the candidates with key >= T0 (every column >= the
    k-th value) are packed ``key << 32 | column`` (ascending column) into the row's ``CBUF`` scratch row and
    read back as (ROWS, CC) registers; then, with all-pairs (CC x CC) compares (the j side in CJ-wide pieces
    re-read from the scratch row when CJ < CC: fewer live registers) and no search:

    - k-th key ``tk`` = the largest key ``key_i`` with ``count(key >= key_i) >= k`` (the pivot search's answer:
      ``count(key >= t)`` only steps at candidate keys), at least T0;
    - top-p: candidate i is kept iff ``mass(key <= key_i) > (1 - p) * Z`` over the top-k set, i.e. ``tp`` is
      the smallest such key (the largest key whose strictly-lower mass is <= (1 - p) * Z, as the search),
      at most the row max; p <= 0 keeps the largest token(s);
    - min-p and the Gumbel-max draw with the same (seed, column, row) noise.

    Returns (ROWS,) int64 tokens and (ROWS,) bool ``big``: rows with more than CC candidates (their token is
    not valid here; the caller runs :func:`_topk_search_draw` for them). Masses are float32 sums in another
    order than the search's: a top-p boundary may differ within float32 rounding, as between chunkings."""
    kk64 = kk.to(tl.int64)
    sel = valid & (kk64 >= t0[:, None])
    n_c = tl.sum(sel.to(tl.int32), axis=1)
    pos = tl.cumsum(sel.to(tl.int32), axis=1) - 1
    tl.store(CBUF + rows[:, None] * CC + pos, (kk64 << 32) | cols, mask=sel & (pos < CC))
    tl.debug_barrier()
    ca = tl.arange(0, CC)
    vc = rmask[:, None] & (ca[None, :] < n_c[:, None])
    pk = tl.load(CBUF + rows[:, None] * CC + ca[None, :], mask=vc, other=0)
    kc = tl.where(vc, (pk >> 32).to(tl.int32), _KEY_MIN)  # below every real key (-inf's: -2^31 + 2^23)
    colc = pk - ((pk >> 32) << 32)
    yc = _unkey(kc)
    kc64 = kc.to(tl.int64)
    # exact k-th key (ties kept): count_i = #{j: key_j >= key_i} (int32 compares), j in CJ-wide pieces
    if CJ >= CC:
        cnt = tl.sum((kc[:, None, :] >= kc[:, :, None]).to(tl.int32), axis=2)
    else:
        cnt = tl.zeros([ROWS, CC], dtype=tl.int32)
        for j0 in tl.static_range(0, CC, CJ):
            kj, _yj = _cbuf_piece(CBUF, rows, rmask, n_c, j0, CC, CJ)
            cnt += tl.sum((kj[:, None, :] >= kc[:, :, None]).to(tl.int32), axis=2)
    tk = tl.max(tl.where(vc & (cnt >= k[:, None]), kc64, t0[:, None]), axis=1)
    tp = tl.full([ROWS], _KEY_MIN, tl.int64)
    top = vc & (kc64 >= tk[:, None])
    if USE_P:
        e = tl.where(top, tl.exp(yc - m_safe[:, None]), 0.0)
        thr = omp * tl.sum(e, axis=1)
        if CJ >= CC:
            mle = tl.sum(tl.where(kc[:, None, :] <= kc[:, :, None], e[:, None, :], 0.0), axis=2)
        else:
            mle = tl.zeros([ROWS, CC], dtype=tl.float32)
            for j0 in tl.static_range(0, CC, CJ):
                kj, yj = _cbuf_piece(CBUF, rows, rmask, n_c, j0, CC, CJ)
                ej = tl.where(kj.to(tl.int64) >= tk[:, None], tl.exp(yj - m_safe[:, None]), 0.0)
                mle += tl.sum(tl.where(kj[:, None, :] <= kc[:, :, None], ej[:, None, :], 0.0), axis=2)
        tpd = tl.min(tl.where(top & (mle > thr[:, None]), kc64, key_max[:, None]), axis=1)
        tp = tl.where(p_on & (p <= 0.0), key_max, tl.where(p_on, tl.minimum(tpd, key_max), _KEY_MIN))
    keep_from = tl.maximum(tk, tp)
    _best, best_i = _gumbel_best(yc, colc, vc, kc64 >= keep_from[:, None], rows, m_safe, mp, seed, V, USE_MINP,
                                 ROWS, CC)
    return best_i, (n_c > CC) & rmask


@triton.jit
def _topk_draw_kernel(
    X, stride_x, BAN, stride_ban, SEED, T_PTR, P_PTR, MINP_PTR, GM, CAND, CBUF, OUT,
    B, V, NG, k_val, t_val, p_val, omp_val, minp_val,
    T_ROWS: tl.constexpr, P_ROWS: tl.constexpr, MINP_ROWS: tl.constexpr,
    USE_P: tl.constexpr, USE_MINP: tl.constexpr, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr,
    G: tl.constexpr, GCAP: tl.constexpr, ET: tl.constexpr, CT: tl.constexpr, FB: tl.constexpr,
    NP: tl.constexpr, NPASS: tl.constexpr, CC: tl.constexpr, CJ: tl.constexpr, NPB: tl.constexpr,
    GEO: tl.constexpr, ROWS: tl.constexpr,
):
    """Launch 2 of the top-k path, one program per row block (one row on a GPU); module docstring. The group
    maxima (ET) and the gathered candidate columns (CT) stay in registers; the tail runs on the compacted
    candidates (``CC`` > 0, :func:`_topk_compact_draw`) or by pivot searches (:func:`_topk_search_draw`)."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    t = _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS, ROWS)
    greedy_t = t <= 0.0
    t_safe = tl.where(greedy_t, 1.0, t)
    k = tl.zeros([ROWS], dtype=tl.int64) + k_val
    ea = tl.arange(0, ET)
    em = rmask[:, None] & (ea < NG)[None, :]
    ev = tl.load(GM + rows[:, None] * NG + ea[None, :], mask=em, other=float("-inf"))
    m = tl.max(ev, axis=1)
    best_g = tl.argmax(ev, axis=1).to(tl.int64)
    greedy = greedy_t | (m == float("inf")) | (m == float("-inf"))
    m_safe = tl.where(greedy, 0.0, m)
    key_max = _key(m_safe).to(tl.int64)
    # Greedy token: the first column of the first group holding the max (torch.argmax's tie rule).
    aj = tl.arange(0, G)
    gcols = best_g[:, None] * G + aj[None, :]
    gm2 = rmask[:, None] & (gcols < V)
    yg = _scaled(_load_at(X, rows[:, None] * stride_x + gcols, BAN, rows[:, None] * stride_ban + gcols, gm2,
                          IS_PROBS, HAS_BAN), t_safe[:, None])
    tok_g = tl.min(tl.where(gm2 & (yg == m[:, None]), gcols, V), axis=1)
    tok_g = tl.where(tok_g >= V, 0, tok_g)

    # 1. T0 = a lower bound of the k-th largest group max: every column >= the row's k-th value lies in a
    #    group whose max is >= T0. Any lo of the search is such a bound (count(>= lo) >= k): stop as soon as at
    #    most GCAP groups reach it.
    ek = _key(ev)
    lo = tl.full([ROWS], _KEY_MIN, tl.int64)
    hi = key_max + 1
    c_lo = tl.zeros([ROWS], dtype=tl.int64) + NG
    active = rmask & ((hi - lo) > 1) & (c_lo > GCAP)
    if GEO:  # first pass: pivots 2^31 .. 2^10 keys below the row max (geometric), clamped into (lo, hi)
        sh = 31 - (21 * tl.arange(0, NPB).to(tl.int64)) // (NPB - 1)
        d = tl.full([NPB], 1, tl.int64) << sh
        piv = tl.maximum(hi[:, None] - d[None, :], lo[:, None] + 1).to(tl.int32)
        lo, hi, c_lo, active = _bound_pass(ek, em, piv, k, lo, hi, c_lo, active, GCAP)
    while tl.max(active.to(tl.int32), axis=0) > 0:  # a loop, not unrolled: compile time
        lo, hi, c_lo, active = _bound_pass(ek, em, _pivots(lo, hi, NPB), k, lo, hi, c_lo, active, GCAP)
    t0 = lo
    # 2. Those groups' ids, ascending, at most GCAP per row (more: the row takes the whole-row fallback).
    sel = em & (ek.to(tl.int64) >= t0[:, None])
    pos = tl.cumsum(sel.to(tl.int32), axis=1) - 1
    tl.store(CAND + rows[:, None] * GCAP + pos, ea[None, :] + tl.zeros([ROWS, ET], dtype=tl.int32),
             mask=sel & (pos < GCAP))
    n_g = tl.sum(sel.to(tl.int32), axis=1)
    tl.debug_barrier()
    full = (n_g > GCAP) & (~greedy) & rmask
    n_keep = tl.minimum(n_g, GCAP)
    cols, valid, y, kk = _gather(X, stride_x, BAN, stride_ban, CAND, rows, rmask, n_keep, t_safe, V, IS_PROBS,
                                 HAS_BAN, G, GCAP, CT)

    # 3. Row parameters of top-p / min-p (HF order: top-p on the renormalised top-k set).
    p = tl.zeros([ROWS], dtype=tl.float32) + 1.0
    omp = tl.zeros([ROWS], dtype=tl.float32)
    p_on = p < 0.0
    if USE_P:
        p, omp = _row_top_p(P_PTR, rows, rmask, p_val, omp_val, P_ROWS, ROWS)
        p_on = (p < 1.0) & (~greedy)
    mp = tl.zeros([ROWS], dtype=tl.float32)
    if USE_MINP:
        mp = _row_min_p(MINP_PTR, rows, rmask, minp_val, MINP_ROWS, ROWS)
    seed = tl.load(SEED).to(tl.int64)

    # 4. Exact k-th value (ties kept), top-p, min-p and the Gumbel-max draw over the kept candidates; noise
    #    keyed by (seed, column, row) as the general path, so both paths draw the same token from the same set.
    if CC > 0:
        best_i, big = _topk_compact_draw(CBUF, y, cols, valid, kk, rows, rmask, t0, key_max, m_safe, k, p, omp,
                                         p_on, mp, seed, V, USE_P, USE_MINP, ROWS, CT, CC, CJ)
        if tl.sum(big.to(tl.int32), axis=0) > 0:  # gathered again: the candidates' registers are free meanwhile
            cols, valid, y, kk = _gather(X, stride_x, BAN, stride_ban, CAND, rows, rmask, n_keep, t_safe, V,
                                         IS_PROBS, HAS_BAN, G, GCAP, CT)
            srch = _topk_search_draw(y, cols, valid, kk, rows, rmask & big, t0, key_max, m_safe, k, p, omp, p_on,
                                     mp, seed, V, USE_P, USE_MINP, NP, ROWS, CT)
            best_i = tl.where(big, srch, best_i)
    else:
        best_i = _topk_search_draw(y, cols, valid, kk, rows, rmask, t0, key_max, m_safe, k, p, omp, p_on, mp, seed,
                                   V, USE_P, USE_MINP, NP, ROWS, CT)
    if tl.sum(full.to(tl.int32), axis=0) > 0:
        slow = _topk_slow(X, stride_x, BAN, stride_ban, seed, CAND, rows, rmask, full, t_safe, m_safe, key_max,
                          k, t0, p, omp, p_on, mp, V, USE_P, USE_MINP, IS_PROBS, HAS_BAN, G, GCAP, FB, NP, NPASS,
                          ROWS)
        best_i = tl.where(full, slow, best_i)
    tl.store(OUT + rows, tl.where(greedy, tok_g, best_i), mask=rmask)


def _sample_topk(x, seed, ts, k, ps, mps, ban_t, ban_stride, use_p, use_minp, is_probs, scalars, out):
    """Launch the two-kernel top-k path (:func:`fast_path_ok` holds)."""
    b, v = x.shape
    cfg = fast_config(b, v)
    dev = x.device
    gm = torch.empty(b, cfg["NG"], dtype=torch.float32, device=dev)
    cand = torch.empty(b, cfg["GCAP"], dtype=torch.int32, device=dev)
    cbuf = torch.empty(b, max(cfg["CC"], 1), dtype=torch.int64, device=dev)
    dummy = out
    ban_arg = dummy if ban_t is None else ban_t
    t_arg = dummy if ts is None else ts
    t_val, _, p_val, omp_val, minp_val = scalars
    common = dict(T_ROWS=ts is not None, IS_PROBS=is_probs, HAS_BAN=ban_t is not None, G=cfg["G"])
    grid1 = (triton.cdiv(b, cfg["ROWS1"]), triton.cdiv(cfg["NG"], cfg["CG"]))
    _group_max_kernel[grid1](x, x.stride(0), ban_arg, ban_stride, t_arg, gm, b, v, cfg["NG"], t_val,
                             CG=cfg["CG"], SBG=cfg["SBG"], ROWS=cfg["ROWS1"], num_warps=cfg["num_warps1"],
                             **common, **FP_OPTIONS)
    grid2 = (triton.cdiv(b, cfg["ROWS"]),)
    _topk_draw_kernel[grid2](x, x.stride(0), ban_arg, ban_stride, seed.reshape(-1), t_arg,
                             dummy if ps is None else ps, dummy if mps is None else mps, gm, cand, cbuf, out,
                             b, v, cfg["NG"], int(k), t_val, p_val, omp_val, minp_val,
                             P_ROWS=ps is not None, MINP_ROWS=mps is not None, USE_P=use_p, USE_MINP=use_minp,
                             GCAP=cfg["GCAP"], ET=cfg["ET"], CT=cfg["CT"], FB=cfg["FB"], NP=cfg["NP"],
                             NPASS=cfg["NPASS"], CC=cfg["CC"], CJ=cfg["CJ"], NPB=cfg["NPB"], GEO=cfg["GEO"],
                             ROWS=cfg["ROWS"], num_warps=cfg["num_warps"], **common, **FP_OPTIONS)
    return out


def sample(scores: torch.Tensor, seed: torch.Tensor, temperature: torch.Tensor | None,
           temperature_value: float, top_k: torch.Tensor | None, top_k_value: int,
           top_p: torch.Tensor | None, top_p_value: float,
           min_p: torch.Tensor | None, min_p_value: float, ban: torch.Tensor | None, is_probs: bool,
           top_k_first: bool) -> torch.Tensor:
    """Launch the sampler; arguments as ``rocm_inductor.ops.sampling.sample`` (validated there).

    Args:
        scores: (B, V) float16/bfloat16/float32, B >= 1, last dim read with unit stride (copied otherwise).

    Returns:
        (B,) int64 token ids in [0, V).

    Raises:
        ValueError: a dtype :func:`check` refuses.
    """
    reason = check({"dtype": scores.dtype})
    if reason is not None:
        raise ValueError(reason)
    if scores.is_cuda and scores.device.index != torch.cuda.current_device():
        with torch.cuda.device(scores.device):
            return _sample(scores, seed, temperature, temperature_value, top_k, top_k_value, top_p,
                           top_p_value, min_p, min_p_value, ban, is_probs, top_k_first)
    return _sample(scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
                   min_p, min_p_value, ban, is_probs, top_k_first)


def _sample(scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value, min_p,
            min_p_value, ban, is_probs, top_k_first) -> torch.Tensor:
    """:func:`sample` on the scores' current device: a fixed sequence of launches (module docstring)."""
    b, v = scores.shape
    x = scores if scores.stride(1) == 1 else scores.contiguous()
    dev = x.device
    out = torch.empty(b, dtype=torch.int64, device=dev)
    ban_t, ban_stride = ban_rows(ban, b, v)
    ts = per_row(temperature, b, torch.float32, dev)
    ks = per_row(top_k, b, torch.int64, dev)
    ps = per_row(top_p, b, torch.float64, dev)
    mps = per_row(min_p, b, torch.float32, dev)
    use_k = ks is not None or 0 < top_k_value < v
    use_p = ps is not None or top_p_value < 1.0
    use_minp = mps is not None or min_p_value > 0.0
    p_s = float(top_p_value)
    if 0.0 < p_s < 1e-30:  # as the per-row clamp: a subnormal p would flush to 0 on the GPU (another path)
        p_s = 1e-30
    scalars = (float(temperature_value), int(min(max(top_k_value, 0), v)), p_s, 1.0 - p_s, float(min_p_value))
    if fast_path_ok(b, v, ks, top_k_value, use_p, top_k_first):
        return _sample_topk(x, seed, ts, top_k_value, ps, mps, ban_t, ban_stride, use_p, use_minp, is_probs,
                            scalars, out)
    if WINNER and not use_k and (use_p or use_minp):
        from .sampling_rows import row_path, sample_rows  # imports this module's helpers

        if row_path(b, v, use_p):
            return sample_rows(x, seed, ts, ps, mps, ban_t, ban_stride, use_p, use_minp, is_probs, scalars, out)
    cfg = launch_config(b, v)
    nch, npiv, rows = cfg["NCH"], cfg["NP"], cfg["ROWS"]
    passes = search_passes(npiv)
    f32 = dict(dtype=torch.float32, device=dev)
    pmax = torch.empty(b, nch, **f32)
    cnt = torch.empty(2, b, nch, npiv, dtype=torch.int32, device=dev) if use_k else out
    win = WINNER and not use_k and (use_p or use_minp)
    sched = chain_schedule(npiv) if win and use_p else ()  # the chain's pivots per pass
    mass = torch.empty(2, b, nch, max((npiv,) + sched), **f32) if use_p else pmax
    zp = torch.empty(b, nch, **f32) if use_p else pmax
    n_steps = 1 + (passes if use_k else 0) + (passes if use_p else 0)
    st = torch.empty(n_steps + 1, 2, b, dtype=torch.int64, device=dev)
    tk = torch.empty(b, dtype=torch.int64, device=dev) if use_p else out
    if win:
        # the chain's candidate partials, [launch % 2] (launch 1 writes [1]); CS: its per-launch row state
        gv2 = torch.empty(2, b, nch, **f32)
        gi2 = torch.empty(2, b, nch, dtype=torch.int64, device=dev)
        gv, gi = gv2[1], gi2[1]
    else:
        gv = torch.empty(b, nch, **f32)
        gi = torch.empty(b, nch, dtype=torch.int64, device=dev) if nch > 1 else out
    dummy = out
    grid = (triton.cdiv(b, rows), nch)
    args = (x, x.stride(0), dummy if ban_t is None else ban_t, ban_stride, seed.reshape(-1),
            dummy if ts is None else ts, dummy if ks is None else ks, dummy if ps is None else ps,
            dummy if mps is None else mps, pmax, cnt, mass, zp, st, tk, gv, gi, out, b, v, nch)
    kw = dict(T_ROWS=ts is not None, K_ROWS=ks is not None, P_ROWS=ps is not None, MINP_ROWS=mps is not None,
              USE_K=use_k, USE_P=use_p, USE_MINP=use_minp, IS_PROBS=is_probs, HAS_BAN=ban_t is not None,
              TOP_K_FIRST=top_k_first, CHUNK=cfg["CHUNK"], BLOCK=cfg["BLOCK"], ROWS=rows, NP=npiv,
              NCHB=cfg["NCHB"], CB=cfg["CB"], WIN=win, ACC=cfg["ACC"], LANE=lane_argmax(b, v),
              num_warps=cfg["num_warps"])

    def launch(step: int, prev: int, cur: int) -> None:
        _step_kernel[grid](*args, step, *scalars, PREV=prev, CUR=cur, **kw, **FP_OPTIONS)

    step, prev = 1, 0
    launch(step, 0, 0)  # maxima (+ top-k pass 1)
    if win:
        return _chain(args, kw, grid, cfg, sched, gv2, gi2, scalars, out)
    if use_k:
        prev = 1
        for _ in range(passes - 1):
            step += 1
            launch(step, 1, 1)
    if use_p:
        for _ in range(passes):
            step += 1
            launch(step, prev, 2)
            prev = 2
    launch(step + 1, prev, 3)  # draw
    if nch > 1:
        frows = _pick_rows(b, cfg["NCHB"])
        _pick_kernel[(triton.cdiv(b, frows),)](gv, gi, out, b, nch, ROWS=frows, NCHB=cfg["NCHB"], OPEN=False,
                                               num_warps=4, **FP_OPTIONS)
    return out


def _pick_rows(b: int, nchb: int) -> int:
    """Rows per program of :func:`_pick_kernel`: a (ROWS, NCHB) tile of at most 4096 partials, <= 256 rows,
    no more than next_pow2(B) (a larger tile spilled 12 SGPRs on gfx at B=1)."""
    return max(1, min(256, 4096 // nchb, triton.next_power_of_2(b)))


#: Parameter names of the two kernels (read once: tests wrap the kernels), so _chain picks its arguments by name.
_STEP_ARGS = tuple(_step_kernel.arg_names)
_CHAIN_ARGS = tuple(_chain_kernel.arg_names)


def _chain(args, kw, grid, cfg, sched, gv2, gi2, scalars, out) -> torch.Tensor:
    """Launches 2 .. len(sched) + 2 of the restricted-winner chain (:func:`_chain_kernel`) after launch 1, pass i
    with ``sched[i]`` pivots (:func:`chain_schedule`; empty: min-p alone), then the pick of the rows still open
    (when a row has more than one chunk)."""
    named = dict(zip(_STEP_ARGS, args))  # launch 1's arguments by parameter name
    x, b, nch = named["X"], named["B"], named["NCH"]
    named.update(CS=torch.empty(len(sched) + 3, 4, b, dtype=torch.int64, device=x.device), GV=gv2, GI=gi2,
                 MSTRIDE=named["MASS"].numel() // 2)  # MASS: [2, B, NCH, max NP] (or a dummy: min-p alone)
    cargs = tuple(named[n] for n in _CHAIN_ARGS[:_CHAIN_ARGS.index("step")])
    ckw = {k: kw[k] for k in ("T_ROWS", "P_ROWS", "MINP_ROWS", "USE_P", "USE_MINP", "IS_PROBS", "HAS_BAN", "CHUNK",
                              "ROWS", "NCHB", "ACC", "LANE", "num_warps")}
    t_val, _k, p_val, omp_val, minp_val = scalars
    # launch 2 cannot reject launch 1's winner without min-p and with one p > 0 (module docstring): no draw code
    draw2 = kw["USE_MINP"] or kw["P_ROWS"] or not p_val > 0.0
    shape = {n: chain_pass_shape(cfg, n) for n in {cfg["NP"], *sched}}  # BLOCK / CB per pivot count, once
    step, prev, pnp = 1, 0, cfg["NP"]
    for npiv in sched:
        step += 1
        _chain_kernel[grid](*cargs, step, t_val, p_val, omp_val, minp_val, PREV=prev, CUR=2,
                            DRAW=bool(prev == 2 or draw2), NP=npiv, PNP=pnp, BLOCK=shape[npiv]["BLOCK"],
                            CB=shape[pnp]["CB"], **ckw, **FP_OPTIONS)
        prev, pnp = 2, npiv
    step += 1
    # the last launch narrows with the previous pass's PNP pivots and only draws: launch 1's tile shape
    _chain_kernel[grid](*cargs, step, t_val, p_val, omp_val, minp_val, PREV=prev, CUR=3, DRAW=True, NP=cfg["NP"],
                        PNP=pnp, BLOCK=cfg["BLOCK"], CB=shape[pnp]["CB"], **ckw, **FP_OPTIONS)
    if nch > 1:
        frows = _pick_rows(b, cfg["NCHB"])
        _pick_kernel[(triton.cdiv(b, frows),)](gv2[step % 2], gi2[step % 2], out, b, nch, ROWS=frows,
                                               NCHB=cfg["NCHB"], OPEN=True, num_warps=4, **FP_OPTIONS)
    return out


# --- ahead-of-time compile cases (rocm_inductor.providers.triton._aot) -----------------------------------
# The general (multi-launch search) path, still used for per-row k, k > 64, top-p first and top-p or
# min-p alone; the top-k path's cases follow.

#: Llama-3 vocabulary (128256) at decode batch 1 and 64 (issue 16's typical sizes).
AOT_SHAPES = ((1, 128256), (64, 128256))


def _search_aot_cases() -> list[dict[str, Any]]:
    """The GPU launch shapes of :func:`_sample` for float32 logits with scalar top-k and top-p on.

    Launches of one call: maxima (PREV=0, CUR=0), top-k passes (1, 1), top-p passes (1, 2) / (2, 2), the draw
    (2, 3), then ``_pick_kernel``. At B=64 the top-p passes (CUR=2) spill with triton 3.6 (the GPU machine's:
    gfx942 30 SGPRs, sm_90 255 registers and 56 B of stack; AOT compile 2026-12-01), not with 3.9: marked
    ``known_spill``.
    """
    ptr = {"X": "*fp32", "stride_x": "i32", "BAN": "*i64", "stride_ban": "i32", "SEED": "*i64",
           "T_PTR": "*i64", "K_PTR": "*i64", "P_PTR": "*i64", "MINP_PTR": "*i64", "PMAX": "*fp32",
           "CNT": "*i32", "MASS": "*fp32", "ZP": "*fp32", "ST": "*i64", "TK": "*i64", "GV": "*fp32",
           "GI": "*i64", "OUT": "*i64", "B": "i32", "V": "i32", "NCH": "i32", "step": "i32", "t_val": "fp32",
           "k_val": "i32", "p_val": "fp32", "omp_val": "fp32", "minp_val": "fp32"}
    flags = ("T_ROWS", "K_ROWS", "P_ROWS", "MINP_ROWS", "USE_K", "USE_P", "USE_MINP", "IS_PROBS", "HAS_BAN",
             "TOP_K_FIRST", "PREV", "CUR", "CHUNK", "BLOCK", "ROWS", "NP", "NCHB", "CB", "WIN", "ACC", "LANE")
    cases = []
    for b, v in AOT_SHAPES:
        cfg = launch_config(b, v, interp=False)
        base = dict(T_ROWS=False, K_ROWS=False, P_ROWS=False, MINP_ROWS=False, USE_K=True, USE_P=True,
                    USE_MINP=False, IS_PROBS=False, HAS_BAN=False, TOP_K_FIRST=True, WIN=False, ACC=cfg["ACC"],
                    LANE=lane_argmax(b, v),
                    **{k: cfg[k] for k in ("CHUNK", "BLOCK", "ROWS", "NP", "NCHB", "CB")})
        spill = "B=64 top-p pass of the general path spills with triton 3.6 (issue 16)"
        for prev, cur in ((0, 0), (1, 1), (1, 2), (2, 2), (2, 3)):
            case = {"name": f"sample step PREV={prev} CUR={cur} B={b} V={v}", "fn": _step_kernel,
                    "signature": {**ptr, **{k: "constexpr" for k in flags}},
                    "constexprs": {**base, "PREV": prev, "CUR": cur}, "num_warps": cfg["num_warps"]}
            if b >= 64 and cur == 2:
                case["known_spill"] = spill
            if b == 1 and (cur, prev) in ((0, 0), (2, 1)):
                # triton 3.9 AOT, 2026-12-01: top-k pass 1 (NP=64, before the sweep) 6 / 9 SGPRs spilled to VGPR
                # lanes on gfx942 / gfx950; first top-p pass after top-k at the swept B=1 constants (NP=16, 4 warps)
                # 21 / 25 SGPRs and 16 B of sm_90 stack. The measured top-p-only launches (USE_K off) are clean.
                case["known_spill"] = "general path with top-k at B=1: SGPR spills (gfx), 16 B stack (sm_90)"
            cases.append(case)
        # top-p and/or min-p without top-k: launch 1 (WIN) draws the winner, then the chain (_chain_kernel):
        # top-p passes PREV=0 -> 2, 2 -> 2, the last launch 2 -> 3; min-p alone 0 -> 3
        cases.append({"name": f"sample top-p-only step PREV=0 CUR=0 B={b} V={v}", "fn": _step_kernel,
                      "signature": {**ptr, **{k: "constexpr" for k in flags}},
                      "constexprs": {**base, "USE_K": False, "WIN": True, "PREV": 0, "CUR": 0},
                      "num_warps": cfg["num_warps"]})
        csig = {k: ptr[k] for k in ("X", "stride_x", "BAN", "stride_ban", "SEED", "T_PTR", "P_PTR", "MINP_PTR",
                                    "PMAX", "MASS", "ZP")}
        csig.update({"CS": "*i64", "GV": "*fp32", "GI": "*i64", "OUT": "*i64", "B": "i32", "V": "i32",
                     "NCH": "i32", "MSTRIDE": "i32", "step": "i32", "t_val": "fp32", "p_val": "fp32",
                     "omp_val": "fp32", "minp_val": "fp32"})
        cflags = ("T_ROWS", "P_ROWS", "MINP_ROWS", "USE_P", "USE_MINP", "IS_PROBS", "HAS_BAN", "PREV", "CUR",
                  "CHUNK", "BLOCK", "ROWS", "NP", "PNP", "NCHB", "CB", "ACC", "LANE", "DRAW")
        csig.update({k: "constexpr" for k in cflags})
        cbase = {k: base[k] for k in cflags if k in base}
        # the passes of chain_schedule: head (NP -> NP), the switch (NP -> tail), tail (tail -> tail), the last
        sched = chain_schedule(cfg["NP"])
        npt = sched[-1]

        def shape(n, cfg=cfg):
            return chain_pass_shape(cfg, n)
        passes = [(0, 2, True, False, cfg["NP"], cfg["NP"], shape(cfg["NP"])["BLOCK"]),
                  (2, 2, True, False, cfg["NP"], cfg["NP"], shape(cfg["NP"])["BLOCK"]),
                  (2, 2, True, False, npt, cfg["NP"], shape(npt)["BLOCK"]),
                  (2, 2, True, False, npt, npt, shape(npt)["BLOCK"]),
                  (2, 3, True, False, cfg["NP"], npt, cfg["BLOCK"]),
                  (0, 3, False, True, cfg["NP"], cfg["NP"], cfg["BLOCK"])]
        for prev, cur, use_p, use_minp, npiv, pnp, block in dict.fromkeys(passes):
            case = {"name": f"sample chain PREV={prev} CUR={cur} NP={npiv} PNP={pnp} top-p={use_p} "
                            f"min-p={use_minp} B={b} V={v}",
                    "fn": _chain_kernel, "signature": csig,
                    "constexprs": {**cbase, "USE_P": use_p, "USE_MINP": use_minp, "PREV": prev, "CUR": cur,
                                   "DRAW": prev == 2 or cur == 3, "NP": npiv, "PNP": pnp, "BLOCK": block,
                                   "CB": shape(pnp)["CB"]},
                    "num_warps": cfg["num_warps"]}
            if b == 1 and npiv != pnp:
                # triton 3.9 AOT, 2026-12-01: the switch to 64 pivots after 16 (one launch per call) spills 9 SGPRs
                # to VGPR lanes on gfx942; gfx950 and sm_90 clean
                case["known_spill"] = "chain 16 -> 64 pivot switch at B=1: 9 SGPRs spilled on gfx942"
            cases.append(case)
        if cfg["NCH"] > 1:
            frows = _pick_rows(b, cfg["NCHB"])
            for open_ in (False, True):
                cases.append({"name": f"sample pick OPEN={open_} B={b} V={v}", "fn": _pick_kernel,
                              "signature": {"GV": "*fp32", "GI": "*i64", "OUT": "*i64", "B": "i32", "NCH": "i32",
                                            "ROWS": "constexpr", "NCHB": "constexpr", "OPEN": "constexpr"},
                              "constexprs": {"ROWS": frows, "NCHB": cfg["NCHB"], "OPEN": open_}, "num_warps": 4})
    return cases


#: Flag sets of the sampler AOT cases (here and :mod:`.sampling_rows`): name -> (score pointer type, flags):
#: float32 scores with scalar parameters, top-p on; bf16 scores with per-row T / p / min-p, min-p on, a ban mask.
AOT_FLAGS = {
    "f32": ("*fp32", dict(T_ROWS=False, P_ROWS=False, MINP_ROWS=False, USE_P=True, USE_MINP=False, IS_PROBS=False,
                          HAS_BAN=False)),
    "bf16_rows_minp_ban": ("*bf16", dict(T_ROWS=True, P_ROWS=True, MINP_ROWS=True, USE_P=True, USE_MINP=True,
                                         IS_PROBS=False, HAS_BAN=True)),
}


def aot_cases() -> list[dict[str, Any]]:
    """Representative compile cases of the top-k path at the launcher's GPU specialisations (HF chain
    T=0.7, k=50, p=0.9 over float32 logits, V=128256 / 151936; min-p + per-row params + bf16 + ban), for the
    ahead-of-time spill / work-group / LDS checks (preamble: sm_90, gfx942, gfx950)."""
    cases = []
    for name, (dt, flags) in AOT_FLAGS.items():
        sig1 = {"X": dt, "stride_x": "i32", "BAN": "*i1", "stride_ban": "i32", "T_PTR": "*fp32", "GM": "*fp32",
                "B": "i32", "V": "i32", "NG": "i32", "t_val": "fp32", "T_ROWS": "constexpr",
                "IS_PROBS": "constexpr", "HAS_BAN": "constexpr", "G": "constexpr", "CG": "constexpr",
                "SBG": "constexpr", "ROWS": "constexpr"}
        for cg in (32, 512):
            cases.append({"name": f"group_max_{name}_cg{cg}", "fn": _group_max_kernel, "signature": sig1,
                          "constexprs": {"T_ROWS": flags["T_ROWS"], "IS_PROBS": False, "HAS_BAN": flags["HAS_BAN"],
                                         "G": GROUP, "CG": cg, "SBG": min(cg, FAST_TILE // GROUP), "ROWS": 1},
                          "num_warps": 4})
        sig2 = {"X": dt, "stride_x": "i32", "BAN": "*i1", "stride_ban": "i32", "SEED": "*i64", "T_PTR": "*fp32",
                "P_PTR": "*fp64", "MINP_PTR": "*fp32", "GM": "*fp32", "CAND": "*i32", "CBUF": "*i64", "OUT": "*i64",
                "B": "i32",
                "V": "i32", "NG": "i32", "k_val": "i32", "t_val": "fp32", "p_val": "fp32", "omp_val": "fp32",
                "minp_val": "fp32"}
        sig2.update({c: "constexpr" for c in ("T_ROWS", "P_ROWS", "MINP_ROWS", "USE_P", "USE_MINP", "IS_PROBS",
                                              "HAS_BAN", "G", "GCAP", "ET", "CT", "FB", "NP", "NPASS", "CC", "CJ",
                                              "NPB", "GEO", "ROWS")})
        for v in (128256, 151936):
            cfg = fast_config(1, v, interp=False)
            cases.append({"name": f"topk_draw_{name}_v{v}", "fn": _topk_draw_kernel, "signature": sig2,
                          "constexprs": {**flags, "ET": cfg["ET"], "ROWS": 1,
                                         **{c: cfg[c] for c in ("G", "GCAP", "CT", "FB", "NP", "NPASS", "CC", "CJ",
                                                                "NPB", "GEO")}},
                          "num_warps": cfg["num_warps"],
                          # AOT 2026-12-01 with the compact tail (CAND_TILE 32 / 64 wide): triton 3.9 (CI) V=128256
                          # 16 warps sm_90 8-16 B of stack, gfx942/gfx950 clean; V=151936 8 warps sm_90 clean,
                          # gfx942/gfx950 7-13 SGPRs spilled. triton 3.6 (the H200's, timed): sm_90 0-8 B;
                          # gfx942 22-25 VGPRs at 16 warps (the pivot-search tail of before: 13), 16-30 SGPRs at 8.
                          "known_spill": "sm_90 stack <= 16 B / gfx SGPR spills in the register-resident top-k draw"})
    return [{**c, "options": dict(FP_OPTIONS)} for c in cases + _search_aot_cases()]  # as launched
