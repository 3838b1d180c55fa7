"""Launch shapes of the sampler (host side, shapes and flags only: capture-safe): the general path's
(:func:`launch_config`), the chain's pivot schedule (:func:`chain_schedule`, :func:`chain_pass_shape`), the top-k
path's (:func:`fast_config`, :func:`fast_path_ok`) and the compile-time limits (:func:`check`). The constants they
read are :mod:`.knobs`'.
"""

from __future__ import annotations

from typing import Any

import torch
import triton

from . import knobs

INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits: ``spec["dtype"]`` in :data:`INPUT_DTYPES`; anything else is taken."""
    if spec.get("dtype") not in INPUT_DTYPES:
        return f"triton sampler takes float16/bfloat16/float32 scores, got {spec.get('dtype')}"
    return None


def lane_argmax(b: int, v: int) -> bool:
    """Whether the general path's launches use per-lane max / argmax accumulators (``LANE``) for a (b, v)
    batch: ``knobs.Knobs.lane_argmax`` when set, else ``b * v >= lane_work`` (measured there, see that knob)."""
    kn = knobs.current()
    return bool(kn.lane_argmax) if kn.lane_argmax is not None else b * v >= kn.lane_work


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
    ``width`` keys (None: ``knobs.Knobs.chain_tail_width``), then ``tail`` (None: ``chain_tail_np``; 0, or that None:
    ``npiv`` throughout), as many passes as always shrink a 2^32-wide key interval to width 1 when a pass of ``n``
    pivots leaves at most ``ceil(d / n)`` (:func:`_winner_pivot`). ``chain_schedule(8, tail=0)`` has
    :func:`winner_passes` (11) entries; with the defaults ``(8, 8, 8, 64, 64, 64, 64)`` and ``chain_schedule(16)``
    ``(16, 16, 64, 64, 64, 64)``.

    Raises:
        ValueError: a pivot count below 2 (one pivot at the candidate's key need not shrink the interval) or not a
            power of two (``tl.arange(0, NP)`` and :func:`chain_pass_shape`'s tiles need one).
    """
    kn = knobs.current()
    width = kn.chain_tail_width if width is None else width
    tail = kn.chain_tail_np if tail is None else tail
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
    ``chunk`` (or ``knobs.Knobs.force_chunk``) overrides the chunk width (tests); ``interp`` (default: whether
    ``TRITON_INTERPRET=1``) picks the interpreter's shape or the GPU's (``aot_cases`` asks for the GPU's).
    """
    kn = knobs.current()
    from .. import interpreting

    interp = interpreting() if interp is None else interp
    vp = triton.next_power_of_2(max(v, 1))
    chunk = chunk or kn.force_chunk
    small = b * v <= kn.small_work
    acc = bool(kn.acc_tile) and (kn.acc_small or not small)
    if interp:
        npiv, max_rows, red = kn.interp_npiv, kn.interp_max_rows, kn.interp_compare_tile
        tile = kn.interp_compare_tile // npiv
        chunk = chunk or vp
    else:
        npiv = kn.npiv_small if small else kn.npiv_large
        tile, max_rows, red = (kn.acc_tile if acc else kn.compare_tile) // npiv, kn.max_rows, kn.reduce_tile
        target = (kn.search_target_small if small else kn.target_programs_mid if b * v <= kn.mid_work
                  else kn.target_programs_large)
        if not chunk:
            chunk = min(max(triton.next_power_of_2(triton.cdiv(b * v, target)), kn.min_chunk), kn.max_chunk)
    chunk = max(min(triton.next_power_of_2(chunk), vp), 4)  # >= 4: the noise takes four columns per Philox call
    nch = triton.cdiv(v, chunk)
    block = min(chunk, tile)
    rows = max(1, min(max_rows, tile // block, triton.next_power_of_2(max(b, 1))))
    nchb = triton.next_power_of_2(nch)
    cb = min(nchb, max(1, red // (rows * npiv)))
    warps = kn.step_warps or (8 if rows * block * npiv >= 16384 else 4)
    return dict(CHUNK=chunk, NCH=nch, BLOCK=block, ROWS=rows, NP=npiv, NCHB=nchb, CB=cb, num_warps=warps,
                ACC=acc)


def fast_config(b: int, v: int, interp: bool | None = None) -> dict[str, int]:
    """Launch shape of the two-launch top-k path for a (b, v) batch (``interp``: the interpreter's shapes;
    None: whether Triton interprets now).

    Returns:
        dict with ``G`` (columns per group), ``NG`` (groups per row), ``GCAP`` (candidate groups gathered per
        row), ``CG`` (groups per program of launch 1), ``SBG`` (groups per tile of launch 1), ``ROWS1`` /
        ``ROWS`` (rows per program of launch 1 / 2), ``ET`` (register tile of group maxima, next_pow2(NG)),
        ``CT`` (register tile of candidate columns, GCAP * G), ``FB`` (tile of the whole-row fallback),
        ``NP`` / ``NPASS`` (pivots per search pass / passes that shrink the 2^32 key range to width 1),
        ``CC`` (compact candidate slots, ``knobs.Knobs.cand_cap`` capped at ``CT``; 0 = pivot searches only), ``CJ``
        (width of the all-pairs pieces, ``cand_tile``), ``NPB``
        (pivots per pass of the bound search), ``GEO`` (geometric first bound pass), ``num_warps1`` /
        ``num_warps``.

    GPU: ``G`` = 32 columns up to V = 131072, else 64 (``ET`` <= 4096); ``GCAP`` = 64 groups (``CT`` 2048 /
    4096); launch 1 aims at ``knobs.Knobs.target_programs`` programs of ``CG`` in [32, 512] groups (B=1, V=128256:
    126 programs of 1024 columns; B=64: 512 programs of 16384); launch 2 is one program per row, 16 warps
    (16 * 64 = 1024 threads on ROCm) holding both tiles in registers. Interpreter: row blocks, tiles up to
    2^20 elements.
    """
    kn = knobs.current()
    from .. import interpreting

    interp = interpreting() if interp is None else interp
    g = kn.interp_group if interp else (kn.group if v <= kn.group_wide_vocab else 2 * kn.group)
    ng = triton.cdiv(v, g)
    ngb = triton.next_power_of_2(ng)
    gcap = min(kn.group_cap, ngb)
    ct = gcap * g
    if interp:
        npiv = kn.interp_npiv
        cg = sbg = ngb
        rows1 = max(1, min(kn.interp_max_rows, kn.interp_compare_tile // (ngb * g), triton.next_power_of_2(b)))
        rows = max(1, min(kn.interp_max_rows, kn.interp_compare_tile // (max(ngb, ct) * npiv),
                          triton.next_power_of_2(b)))
        fb = ct
    else:
        npiv = kn.fast_npiv if ct <= 2048 else kn.fast_npiv_wide
        cg = min(max(triton.next_power_of_2(triton.cdiv(b * ng, kn.target_programs)), 32), 512, ngb)
        sbg = min(cg, kn.fast_tile // g)
        rows1 = rows = 1
        fb = kn.fast_tile
    cc = min(triton.next_power_of_2(kn.cand_cap), ct) if kn.cand_cap else 0
    if interp and cc:
        rows = max(1, min(rows, kn.interp_compare_tile // (cc * cc)))
    npb = kn.fast_npiv_bound or npiv
    wide = v > kn.group_wide_vocab and not interp
    cj = min((kn.cand_tile_wide if wide else kn.cand_tile) or cc, cc) if cc else 1
    return dict(G=g, NG=ng, GCAP=gcap, CG=cg, SBG=sbg, ROWS1=rows1, ROWS=rows, ET=ngb, CT=ct, FB=fb, NP=npiv,
                NPASS=search_passes(npiv), CC=cc, CJ=cj, NPB=npb, GEO=bool(kn.fast_geo), num_warps1=4,
                num_warps=kn.num_warps2_wide if wide else kn.num_warps2)


def fast_path_ok(b: int, v: int, top_k: torch.Tensor | None, top_k_value: int, use_p: bool,
                 top_k_first: bool) -> bool:
    """Host-side choice (shapes and flags only, capture-safe): a scalar ``0 < k < V``, ``k <= TOPK_CAP``, and
    top-p (if on) applied after top-k."""
    kn = knobs.current()
    return (kn.fast_topk and top_k is None and 0 < top_k_value < v and top_k_value <= kn.topk_cap
            and (top_k_first or not use_p))


def _pick_rows(b: int, nchb: int) -> int:
    """Rows per program of :func:`_pick_kernel`: a (ROWS, NCHB) tile of at most 4096 partials, <= 256 rows,
    no more than next_pow2(B) (a larger tile spilled 12 SGPRs on gfx at B=1)."""
    return max(1, min(256, 4096 // nchb, triton.next_power_of_2(b)))
