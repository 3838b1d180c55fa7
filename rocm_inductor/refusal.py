"""Typed refusals: a provider's (or the policy's) reason for not taking a match, with a kind to branch on.

A :class:`Refusal` is a ``str`` (the report prints it as it always printed reasons) that also carries a
``kind``, so a pass asks ``refusal.kind`` instead of searching the text for a phrase. A leaf module: providers,
dispatch and passes import it.
"""

from __future__ import annotations

from collections.abc import Iterable

#: A library or kernel limit (dtype, layout, head dim): the default kind of any plain string reason.
LIMIT = "limit"
#: Measured on this GPU and the alternative (cuBLAS, Inductor's kernel) won: reported with the numbers.
MEASURED_SLOWER = "measured_slower"
#: Measured faster, but another limit refuses it (a weight's layout): reported with that limit.
MEASURED_REFUSED = "measured_refused"
#: No measurement for this shape on this GPU: the conservative default holds (a single GEMM: not reported).
NOT_MEASURED = "not_measured"

KINDS = (LIMIT, MEASURED_SLOWER, MEASURED_REFUSED, NOT_MEASURED)


class Refusal(str):
    """A reason in plain words (``str``) with a :attr:`kind` (one of :data:`KINDS`).

    Args:
        text: the reason as the report prints it.
        kind: what sort of refusal it is.

    Raises:
        ValueError: an unknown kind.
    """

    kind: str

    def __new__(cls, text: str, kind: str = LIMIT) -> Refusal:
        if kind not in KINDS:
            raise ValueError(f"rocm_fused: unknown refusal kind {kind!r}; kinds are {list(KINDS)}")
        obj = super().__new__(cls, text)
        obj.kind = kind
        return obj

    def __reduce__(self):  # pickles (FX-cache reports) keep the kind
        return (Refusal, (str(self), self.kind))


def kind_of(reason: str) -> str:
    """The kind of a reason: its :attr:`Refusal.kind`, :data:`LIMIT` for a plain string."""
    return getattr(reason, "kind", LIMIT)


def prefixed(prefix: str, reason: str) -> Refusal:
    """``f"{prefix}{reason}"`` keeping ``reason``'s kind (dispatch prefixes each reason with the provider's name)."""
    return Refusal(f"{prefix}{reason}", kind_of(reason))


def any_of(reasons: Iterable[str], *kinds: str) -> bool:
    """True when one of ``reasons`` is of one of ``kinds``."""
    return any(kind_of(r) in kinds for r in reasons)
