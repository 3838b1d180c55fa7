"""Command-line pieces the decode benchmarks share: one definition of each common flag and its meaning."""

from __future__ import annotations

import argparse


def ints(s: str) -> list[int]:
    """``"1,8,32"`` -> ``[1, 8, 32]`` (empty items skipped).

    Raises:
        ValueError: an item is not an integer.
    """
    return [int(x) for x in s.split(",") if x.strip()]


def add_step_args(p: argparse.ArgumentParser, *, reps: int = 20, rounds: int = 5, budget_s: float = 480.0,
                  layers: int | None = None) -> None:
    """Add the flags every decode-step benchmark takes.

    ``--reps`` (steps per timing round), ``--rounds`` (timing rounds; median and spread reported), ``--layers``
    (override the models' layer count), ``--pos`` (decode position in the static cache; valid slots = pos + 1),
    ``--budget-s`` (skip runs that would end past this many seconds), ``--device`` and ``--tiny`` (small
    models: the CPU smoke test), with the given defaults.
    """
    p.add_argument("--reps", type=int, default=reps, help="steps per timing round")
    p.add_argument("--rounds", type=int, default=rounds, help="timing rounds (median and spread reported)")
    p.add_argument("--layers", type=int, default=layers, help="override the models' layer count")
    p.add_argument("--pos", type=int, default=512, help="decode position (valid cache slots = pos + 1)")
    p.add_argument("--budget-s", type=float, default=budget_s, help="skip runs that would end past this")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="small models (smoke test)")
