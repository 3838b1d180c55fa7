"""Decisions measured on the user's GPU: which rewrite, provider and kernel config wins per op and shape.

The flow, per candidate a tuned pass gates (``passes/contract.py:run_pass`` calls :func:`decide.decide`
between ``gate`` and ``emit``):

- level 0 / 1 read the :class:`~rocm_inductor.tuning.store.DecisionStore` and never measure: an entry
  measured on this device (``source="store"``), else a shipped entry for this GPU model
  (``tuning/shipped/*.json``, ``source="shipped:<gpu name>"``), else today's conservative default
  (``source="default"``, and the report says how to measure it);
- level 2 (max-autotune) measures what the store lacks through :data:`decide.measure_hook` (set by
  ``rocm_inductor.tuning.tuner``), records the result, then decides as level 1 does.

Modules: ``device`` (the :class:`~rocm_inductor.tuning.device.DeviceKey` a decision is valid for),
``store`` (the decision format and the on-disk store), ``decide`` (the pass contract's hook).
"""
