"""The documented log switches work (issue 17): ``torch._logging.set_logs(rocm_fused_graphs=True)`` (a
``TypeError`` on torch 2.13 before) and ``TORCH_LOGS=rocm_fused_graphs`` (``import torch`` failed before)."""

from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from rocm_inductor import report

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.skipif("TORCH_LOGS" in os.environ, reason="set_logs is ignored while TORCH_LOGS is set")
def test_set_logs_takes_our_names():
    try:
        torch._logging.set_logs(rocm_fused_graphs=True)
        assert report.graph_logger() is not None
        torch._logging.set_logs(rocm_fused=logging.DEBUG)
        assert logging.getLogger("rocm_inductor").isEnabledFor(logging.DEBUG)
        assert report.graph_logger() is None  # set_logs replaces the settings, as torch's own names do
    finally:
        torch._logging.set_logs()
    assert report.graph_logger() is None and not logging.getLogger("rocm_inductor").isEnabledFor(logging.INFO)


def test_torch_logs_env_var_names_the_artifact():
    code = ("import torch\n"  # failed here before: the name is unknown while torch is imported
            "import rocm_inductor\n"
            "from rocm_inductor import report\n"
            "import logging\n"
            "assert report.graph_logger() is not None\n"
            "assert logging.getLogger('rocm_inductor').isEnabledFor(logging.DEBUG)\n"
            "print('ok')\n")
    env = {**os.environ, "TORCH_LOGS": "rocm_fused_graphs,+rocm_fused",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
