#!/usr/bin/env python
"""Print registers / spills / scratch / LDS of every Triton kernel case for gfx942, gfx950 and sm_90.

Compiles ahead of time on a CPU-only machine (``rocm_inductor.providers.triton._aot``); run from the repo
root: ``python scripts/aot_report.py [--no-cache] [--json out.json] [--targets gfx942,sm_90]``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)  # interpreted kernels cannot be compiled
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from rocm_inductor.providers.triton._aot import main

    sys.exit(main())
