"""scripts/recognition_census.py classifies: a rewritten spelling is full, a negative left alone, a candidate
nobody reports is silent, a rewrite outside the numerics contract is wrong (tiny cases, reference provider)."""

from __future__ import annotations

import sys
from pathlib import Path

import rope_spellings as R
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import recognition_census as C  # noqa: E402


def test_census_outcomes():
    cases = R.census_cases()
    full = C.run_case(C.Case("rope", "hf", *cases["hf_llama_unsqueeze1"]))
    near = C.run_case(C.Case("rope", "near", *cases["near_rope_sign (negative)"]))
    silent = C.run_case(C.Case("rope", "doubling", lambda: ((lambda x: x * 2), (torch.randn(2, 4),), None), 1))
    assert (full.outcome, full.rewritten) == ("full", 1), full
    assert near.outcome == "left alone" and "verification failed" in near.detail, near
    assert silent.outcome == "silent", silent
    counts = C.summarize([full, near, silent])["rope"]
    assert (counts["full"], counts["silent"], counts["left alone"], counts["positives"], counts["negatives"]) == (
        1, 1, 1, 2, 1)


def test_contract_check_flags_a_wrong_output():
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    good = x.double() * 2
    assert C._contract((x * 2,), (x * 2,), (good,)) == ""
    assert "rel err" in C._contract((x * 3,), (x * 2,), (good,))
