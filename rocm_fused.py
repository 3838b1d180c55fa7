"""Placeholder top-level module so that ``TORCH_LOGS="+rocm_fused"`` is valid at ``import torch`` time.

torch validates every TORCH_LOGS name while it is imported, before ``rocm_inductor`` can register its log
alias; a name that is an importable module is accepted. ``rocm_inductor.report`` then points the
``rocm_fused`` alias at the ``rocm_inductor`` logger. Nothing else lives here: import ``rocm_inductor``.
"""
