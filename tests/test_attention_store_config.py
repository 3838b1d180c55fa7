"""The decode attention launcher reads the tuning store's configs (``providers/triton/attention/config.py``,
issue 30): a measured entry applies only to the call it measured (its batch, cache length and variant: mask kind,
sliding window, sinks, soft cap), shipped sweep entries to the nearest measured bucket; a symbolic batch or query
length gets no launch-config candidates (nothing could read their winner back)."""

from __future__ import annotations

import pytest
import torch
from test_tuning_tuner import FAKE

from rocm_inductor.providers.triton.attention import config as ac
from rocm_inductor.tuning import device, store, tuner


def _spec(**kw):
    s = {"dtype": torch.float16, "batch": 8, "head_dim": 64, "v_head_dim": 64, "q_len": 1, "kv_len": 1024,
         "num_q_heads": 32, "num_kv_heads": 8, "mask_kind": "none", "mask_dtype": None, "mask_shape": None,
         "last_dim_contiguous": True, "cudagraphs": True, "sinks_dtype": None, "positions_dtype": torch.int64,
         "window": 0, "softcap": 0.0}
    s.update(kw)
    return s


@pytest.fixture
def st(monkeypatch, tmp_path):
    monkeypatch.setenv(store.ROOT_ENV, str(tmp_path / "store"))
    monkeypatch.setenv(store.SHIPPED_ENV, "0")
    ac._lookup.cache_clear()
    with device.override(FAKE):
        yield store.default_store()
    ac._lookup.cache_clear()


def _record(st, spec, splits, block_n):
    st.record(FAKE, store.Decision("decode_attention", store.signature("decode_attention", spec), "triton",
                                   {"num_splits": splits, "block_n": block_n},
                                   {"inductor": 10.0, f"triton:{splits}x{block_n}": 3.0}, "measured"))
    ac._lookup.cache_clear()


def _pick(b=8, call=None):
    cfg = ac.pick(b, 32, 8, 1, 1024, 64, 64, torch.float16, 132, call=call)
    return cfg["NSPLIT"], cfg["BLOCK_N"], cfg["source"]


def test_a_sliding_window_layer_and_a_full_layer_keep_their_own_configs(st):
    """GPT-OSS / Gemma style alternating layers of one shape: each runs the config measured for it."""
    _record(st, _spec(), 16, 64)
    _record(st, _spec(window=128), 1, 128)
    assert _pick(call=ac.variant("none", 128, positions=True))[:2] == (1, 128)
    assert _pick(call=ac.variant("none", 0, positions=True))[:2] == (16, 64)
    assert _pick(call=ac.variant("bool", 0, positions=True))[2] == "heuristic"  # no entry measured with a mask
    assert _pick(call=ac.variant("none", 0, sinks=True, positions=True))[2] == "heuristic"
    assert _pick(call=ac.variant("none", 0))[2] == "heuristic"  # measured with positions, called without


def test_a_measured_entry_is_not_borrowed_by_another_batch(st):
    _record(st, _spec(batch=32), 1, 128)
    assert _pick(b=32, call=ac.variant(positions=True))[:2] == (1, 128)
    assert _pick(b=1, call=ac.variant(positions=True))[2] == "heuristic"  # was the B = 32 entry's 1 split


def test_a_symbolic_batch_or_query_length_gets_no_launch_config_candidates():
    assert tuner.attention_configs(_spec())
    assert tuner.attention_configs(_spec(batch=None)) == []
    assert tuner.attention_configs(_spec(q_len=None)) == []
    assert tuner.attention_configs(_spec(kv_len=None)) == []
