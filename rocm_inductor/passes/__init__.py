"""Rewrite passes over the post-grad graph; the manager (``manager.py``) runs them in this order.

A pass is an object with ``name`` (str), ``ops`` (custom op names it may emit) and
``__call__(graph, ctx)``; it records matches and near-misses in ``ctx`` (``manager.PassContext``).
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _passes() -> tuple:
    from .attention import AttentionPass
    from .rms_norm import RMSNormPass
    from .rope import RoPEPass
    from .sampling import SamplingPass
    from .sigmoid_gate import SigmoidGatePass

    return (RMSNormPass(), RoPEPass(), SigmoidGatePass(), SamplingPass(), AttentionPass())


def all_passes() -> tuple:
    """Every rewrite pass in run order (instances are created once, patterns registered lazily)."""
    return _passes()
