"""The sampler's launch constants and path switches, read in one place (:func:`current`).

The launchers and launch-shape functions of the package (``configs``, ``launch``, ``rows``) read every constant
through :func:`current`; code that wants other values for a while (tests, benchmarks, sweeps) uses
:func:`override`. None of these is read by a kernel: they pick the constexprs and grids a launch passes, so a
knob's value changes which variant compiles, never the source of one.

Measurements cited below are rows of ``benchmarks/results/runs/sampling.csv`` (H200, torch 2.11, triton 3.6,
float32 ``randn * 3`` logits, T = 0.7, the op in a CUDA graph) unless another file is named.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class Knobs:
    """The sampler's constants (defaults: what the package ships with). Names are the lower-case spellings of the
    module constants they replaced (``WINNER`` -> ``winner``, the row path's ``ROW_PATH`` -> ``row_path``).

    General (search) path, two buckets by ``B * V`` (``configs.launch_config``): picked by
    ``benchmarks/sweeps/sweep_sampling.py`` at V=128256, top-p 0.9 alone (``benchmarks/results/runs/sampling.csv``,
    run 2026-12-01-1117-sampling-sweep): small work best with 16 pivots, 16384-element compare tiles, 4 warps; large
    work with 8 pivots, the accumulated 8192-element tile, 1056 target programs.
    """

    #: Pivots per search pass: small work (launch-bound) / large work (compare-bound).
    npiv_small: int = 16
    npiv_large: int = 8
    #: ``B * V`` up to which the small-work constants are used.
    small_work: int = 1 << 21
    #: GPU, small work: elements of the (ROWS, NP, BLOCK) compare tile per step (reduced every step).
    compare_tile: int = 16384
    #: GPU chunking: aim at about this many programs (small / large work); also the top-k path's launch-1 target.
    target_programs: int = 528
    target_programs_large: int = 1056
    #: General path's program targets with the chain: 1056 for small work (B=8: 46.3 us vs 51.1 at 528), 528 up to
    #: ``mid_work`` (B=32: 89.4 vs 96.3), ``target_programs_large`` above (B=64: 147 vs 162; run
    #: 2026-12-01-1231-sampling-lanes).
    search_target_small: int = 1056
    mid_work: int = 1 << 22
    target_programs_mid: int = 528
    #: Chunk width range (columns, powers of two) and rows per program of the general path.
    min_chunk: int = 1024
    max_chunk: int = 16384
    max_rows: int = 256
    #: GPU, large work (or any with ``acc_small``): search passes keep a (ROWS, NP, BLOCK) accumulator of this many
    #: elements over the chunk and reduce it once (``ACC``); None: per-step reductions everywhere.
    acc_tile: int | None = 8192
    acc_small: bool = False
    #: Warps of every search launch (None: 8 for compare tiles of >= 16384 elements, else 4); both swept buckets
    #: ran best at 4 (run 2026-12-01-1117-sampling-sweep).
    step_warps: int | None = 4
    #: Elements of the (ROWS, chunks, NP) tile that reduces the previous pass's partials.
    reduce_tile: int = 8192
    #: Under ``TRITON_INTERPRET=1`` numpy pays per op, not per element: one chunk per row, tiles up to Triton's
    #: 2^20-element limit, many rows per program.
    interp_compare_tile: int = 1 << 20
    interp_max_rows: int = 4096
    interp_npiv: int = 16

    #: Top-k path: a scalar k up to this takes the two-launch path (HF's default 50, the common 20 / 40).
    topk_cap: int = 64
    #: Columns per group (launch 1 keeps one max per group) and groups gathered per row by launch 2 (2x
    #: ``topk_cap``: bf16 logits tie often at the k-th group max); ``fast_tile``: columns per step of launch 1.
    group: int = 32
    group_cap: int = 64
    fast_tile: int = 2048
    #: Above this vocabulary a group is ``2 * group`` columns (at most 4096 group maxima per row).
    group_wide_vocab: int = 131072
    #: Launch 2's pivots per search pass: 8 while the candidate tile is <= 2048 columns, else 4. Ahead-of-time
    #: compiles for sm_90 (``scripts/aot_report.py``, triton 3.9, 16 warps): V=128256 (2048 candidates, 8 pivots)
    #: no spills; V=151936 (4096, 4 pivots) 48-80 B spilled, with 8 pivots and unrolled passes 4.4 KB.
    fast_npiv: int = 8
    fast_npiv_wide: int = 4
    #: Warps of launch 2 (16 * 64 = 1024 threads: the ROCm work-group limit); ``_wide`` above ``group_wide_vocab``:
    #: V=151936 8 warps 24.4 us vs 16 warps 26.8-29.3, V <= 128256 16 warps 21.2 vs 8 warps 23.3 (HF chain, B=1,
    #: run 2026-12-01-1236-sampling-topk-tail).
    num_warps2: int = 16
    num_warps2_wide: int = 8
    #: Launch 2's compact tail: up to this many candidates with key >= T0 are packed into a scratch row and the
    #: k-th value, top-p and the draw run as all-pairs compares instead of pivot searches (0: searches only).
    #: V=128256 B=1 HF chain: searches 34.6 us, compact tail 28.5, with the geometric bound 21.2-24.6; 256 slots
    #: with ``group_cap`` 128 36.1 (run 2026-12-01-1236-sampling-topk-tail).
    cand_cap: int = 128
    #: Width of the compact tail's all-pairs pieces (None: one ``cand_cap``-wide tile); ``_wide`` as
    #: ``num_warps2_wide``. HF chain B=1, V=32000 / 128256: pieces of 32 19.5 / 21.2 us, of 64 21.6 / 23.4, one
    #: tile 21.7 / 24.6 (same run); one tile also spilled 96-120 B of sm_90 stack with triton 3.6.
    cand_tile: int | None = 32
    cand_tile_wide: int | None = 64
    #: Pivots per pass of launch 2's bound search (None: ``fast_npiv`` / ``fast_npiv_wide``; 16 spilled 280 B of
    #: sm_90 stack), and whether its first pass puts them at geometric key distances 2^31 .. 2^10 below the row
    #: max (where the k-th group max of float logits lies): V=128256 B=1 34.6 -> 30.7 us on the searches (same run).
    fast_npiv_bound: int | None = None
    fast_geo: bool = True
    interp_group: int = 8
    #: The two-launch top-k path on (tests turn it off to compare with the general path).
    fast_topk: bool = True

    #: No top-k: launch 1 draws the whole-row Gumbel winner and the restricted-winner chain runs the rest (tests
    #: turn it off to compare with the plain search).
    winner: bool = True
    #: Lane accumulators for launch 1's max and the draws' argmax (same tokens): True / False everywhere, None: on
    #: from ``B * V >= lane_work``. Off -> on, top-p 0.9: V=128256 B=32 87.8 -> 83.9 us, B=64 131.4 -> 122.8;
    #: below 4e6 a tie or a loss (V=32000 B=32 56.9 -> 58.2; run 2026-12-01-1530-sampling-schedules).
    lane_argmax: bool | None = None
    lane_work: int = 4_000_000
    #: The chain's pivot schedule (``configs.chain_schedule``): the launch's NP pivots while the key interval is
    #: wider than ``chain_tail_width``, then ``chain_tail_np`` (None: NP throughout): the late launches are nearly
    #: empty, so their count is their cost. Top-p 0.9, no tail / tail after 2 passes / after 3: V=128256 B=1 >= 22.6
    #: / 20.9 / 22.6 us, B=32 79.8 / 79.9 / 72.8; 2^24 keys is 2 passes of 16 pivots, 3 of 8: the best of each
    #: (run 2026-12-01-1925-sampling-chain-tail).
    chain_tail_width: int = 1 << 24
    chain_tail_np: int | None = 64
    #: Tests only: force this chunk width (a power of two) to exercise the split path under the interpreter.
    force_chunk: int | None = None

    #: Row path (``rows.row_path``), chain -> rows, top-p 0.9: V=32000 B = 1 / 8 / 32 / 64 22.0 / 27.5 / 48.2 /
    #: 63.2 -> 11.8 / 19.1 / 26.4 / 31.9 us; V=151936 B=64 155.3 -> 122.1; at V >= 128256 and B <= 32 the chain
    #: wins (B=32 77.9 vs 79.5). Min-p alone: V=32000 B=32 / 64 17.8 / 26.8 -> 17.4 / 20.2, the chain at B <= 8
    #: (run 2026-12-01-1709-sampling-rows). True / False: the row path for every (B, V) without top-k (tests).
    row_path: bool | None = None
    row_max_v: int = 65536
    row_min_b_wide: int = 64
    row_min_b_minp: int = 32
    #: Columns per tile of the row kernel's passes (``_wide``: V > ``row_max_v``) and its warps (16 * 64 = 1024:
    #: the ROCm work-group limit): 8192 / 16 warps best at V=32000 (B=32 26.4 us; 4096 / 8 warps 31.4), 16384 at
    #: V >= 128256 B=64 (104.3 / 122.1; 8192: 113.0 / 135.0; same run).
    row_block: int = 8192
    row_block_wide: int = 16384
    row_warps: int = 16
    #: The split first pass: ``CHUNK = clamp(next_pow2(B * V / row_target_programs), row_min_chunk,
    #: row_max_chunk)`` unless ``row_chunk`` forces one (0: the row's program runs it). V=32000 top-p, chunk
    #: 2048 / 4096 / 8192: B=1 11.8 / 12.8 / 15.7 us, B=64 32.8 / 32.5 / 31.9; unsplit 22.4 .. 35.4 (same run).
    row_chunk: int | None = None
    row_target_programs: int = 256
    row_min_chunk: int = 2048
    row_max_chunk: int = 4096
    row_block1: int = 2048
    row_warps1: int = 4
    #: Redraws before the exact search takes over (tests set 0 to exercise it), and that search's pivots per pass.
    row_tries: int = 4
    row_np: int = 8
    #: Interpreter: one wide tile and many rows per program (``ROWS * BLOCK`` up to 2^20 elements).
    interp_row_block: int = 1 << 16
    interp_tile: int = 1 << 20
    interp_row_chunk: int | None = None


_SET = Knobs()  # what override() set (the defaults outside any override)


def current() -> Knobs:
    """The constants in force: the innermost :func:`override`'s values, else the defaults."""
    return _SET


@contextlib.contextmanager
def override(**changes) -> Iterator[Knobs]:
    """Run the ``with`` block with these :class:`Knobs` fields changed (process-wide; nested overrides stack),
    e.g. ``with override(winner=False): ...``. Yields the knobs set.

    Raises:
        TypeError: a name that is not a :class:`Knobs` field.
    """
    global _SET
    saved = _SET
    _SET = dataclasses.replace(saved, **changes)
    try:
        yield _SET
    finally:
        _SET = saved
