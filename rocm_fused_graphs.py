"""Placeholder top-level module so that ``TORCH_LOGS="rocm_fused_graphs"`` is valid at ``import torch`` time.

torch validates every TORCH_LOGS name while it is imported, before ``rocm_inductor`` can register its
``rocm_fused_graphs`` artifact; a name that is an importable module is accepted (torch then registers it as
a log of that module). ``rocm_inductor.report`` turns that registration into the artifact (each pass's
before/after graph code) and re-reads TORCH_LOGS. Nothing else lives here: import ``rocm_inductor``.
"""
