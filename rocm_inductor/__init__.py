"""rocm_inductor: the ``rocm_fused`` torch.compile backend.

Use it by name, no import needed: ``torch.compile(model, backend="rocm_fused", options={...})``.
Importing this package registers the ``rocm_fused::*`` custom ops (the backend imports them too); it
does not register the backend name itself (Dynamo does, from the entry point).
"""

from __future__ import annotations

from . import ops  # noqa: F401
from .inspection import explain
from .options import Options, parse_options
from .platform import Platform, PlatformDispatch
from .report import Report, clear_reports, last_report, reports

__all__ = ["Options", "parse_options", "Platform", "PlatformDispatch", "reports", "last_report",
           "clear_reports", "explain", "Report", "__version__"]
__version__ = "0.1.0"
