"""Triton sampler without top-k, session topp3 (issue 14): the restricted-winner chain with its own per-launch
shapes (:func:`chain_schedule`), under the interpreter (tiny shapes).

Launch 2 and launches >= 3 may take other pivot counts and chunk widths than launch 1 (the partial buffers are
re-laid out per launch), and the launches from ``CHAIN_LOOP_FROM`` on may run as one looping launch with one
program per row (:func:`_chain_loop_kernel`). Every schedule must draw the plain search's token
(``WINNER = False``, same seed) on rows whose candidates are rejected again and again (low p, high
temperature, per-row p / min-p, a row of ties, all -inf / NaN rows), at B in {1, 3, 8}, V = 301 (no chunk
divides it).
"""

from __future__ import annotations

import pytest
import torch

from rocm_inductor.providers.triton import sampling as S

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # compiled on a GPU: the looping launch's barriers
_G = torch.Generator().manual_seed(23)
_X = torch.randn(8, 301, generator=_G) * 2.5
_X[5] = 1.0  # all tied
_X[6] = -float("inf")
_X[7, 9] = float("nan")
_X = _X.to(DEV)

# (FORCE_CHUNK, CHAIN_NP2, CHAIN_CHUNK2, CHAIN_NP3, CHAIN_CHUNK3, CHAIN_LOOP_FROM)
SCHEDULES = {
    "fine_late": (64, 4, None, 8, 16, None),  # launches >= 3 in 16-column chunks (19 per row)
    "coarse2_fine_late": (64, 2, 128, 32, 32, None),  # launch 2 coarser than launch 1, 32 pivots later
    "loop_late": (64, 8, None, 16, None, 1),  # launches >= 3 as one looping launch
    "loop_all": (32, None, None, 4, None, 0),  # launch 2 on as one looping launch, 4 pivots
}


def _draw(x, seed, temperature=1.0, top_p=1.0, min_p=0.0, p_rows=None, mp_rows=None):
    seed_t = torch.tensor([seed], dtype=torch.int64, device=x.device)
    return S.sample(x, seed_t, None, temperature, None, 0, p_rows, top_p, mp_rows, min_p, None, False, True).cpu()


def _set(monkeypatch, sched):
    for name, val in zip(("FORCE_CHUNK", "CHAIN_NP2", "CHAIN_CHUNK2", "CHAIN_NP3", "CHAIN_CHUNK3",
                          "CHAIN_LOOP_FROM"), sched):
        monkeypatch.setattr(S, name, val)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_chain_schedules_draw_the_searchs_tokens(name, monkeypatch):
    """Each schedule, B = 8 (rejections, ties, bad rows) and B = 1 / 3 (one / a partial row block)."""
    _set(monkeypatch, SCHEDULES[name])
    b = 8 if name != "loop_all" else 3
    cases = [dict(temperature=2.0, top_p=0.15),
             dict(temperature=1.4, p_rows=torch.linspace(0.0, 1.0, b, device=DEV),
                  mp_rows=torch.linspace(0.0, 0.2, b, device=DEV))]
    for kw in cases:
        for x in (_X[:b], _X[:1]):
            kw1 = {k: (v[: x.shape[0]] if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
            monkeypatch.setattr(S, "WINNER", True)
            a = _draw(x, 3, **kw1)
            monkeypatch.setattr(S, "WINNER", False)
            assert torch.equal(a, _draw(x, 3, **kw1)), (name, kw, x.shape)


def test_schedule_shapes_and_pass_counts(monkeypatch):
    """chain_passes covers 2^32 keys with ceil(d / NP) per pass; the schedule's launches and loop marks."""
    assert S.chain_passes([8]) == 11 and S.chain_passes([16]) == 8 and S.chain_passes([4, 8]) == 11
    assert S.chain_passes([16, 128]) == 5
    with pytest.raises(ValueError):
        S.chain_passes([1, 8])
    _set(monkeypatch, SCHEDULES["fine_late"])
    cfg = S.launch_config(8, 301)
    sched = S.chain_schedule(8, 301, cfg, True)
    assert len(sched) == S.chain_passes([4, 8]) + 1
    assert sched[0]["NP"] == 4 and sched[0]["CHUNK"] == 64 and sched[1]["CHUNK"] == 16 and sched[1]["NCH"] == 19
    assert [c["CHUNK"] for c in S.chain_schedule(8, 301, cfg, False)] == [16]  # min-p alone: the last launch
    _set(monkeypatch, SCHEDULES["loop_late"])
    sched = S.chain_schedule(8, 301, S.launch_config(8, 301), True)
    assert not sched[0].get("LOOP") and all(c["LOOP"] and c["NCH"] == 1 for c in sched[1:])
