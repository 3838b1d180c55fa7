"""The AOT compile cases of the decode attention's kernels (``rocm_inductor.providers.triton._aot``)."""

from __future__ import annotations

import triton

from .config import MAX_SPLITS, combine_warps, launch_config
from .kernels import _combine_kernel, _split_kernel


def aot_cases() -> list[dict]:
    """Representative compile cases (the specialisations :func:`decode_attention` picks) for the AOT check.

    bf16, picks of :func:`launch_config` for ROCm (the same as CUDA's except a 256 head dim with B * Hkv <= 8,
    where CUDA takes BLOCK_N 128: sm_90 208 registers, no stack, checked by hand 2026-12-01; it spills on
    gfx942, hence not a ROCm pick and not listed): Llama-3.2-1B (32/8 heads, D 64) at B = 1 (split) and with an
    8-token query (BLOCK_M 32, a per-position mask) unsplit, Qwen3-0.6B (16/8, D 128), gemma-2b (8/1, D 256)
    at B = 32, an additive bf16 mask; GPT-OSS-20B's attention with sinks (64/8, D 64, HF eager's additive bf16
    mask) on a 128-slot sliding-window layer at B = 32 (unsplit: the sink in the store); the combine kernel at
    64 splits for Dv 64 and 256, and with sinks for Dv 64 (a split full-attention layer); the one-launch form
    (the merge in the last split program) of Llama-3.2-1B at B = 1, and the positions form (no mask, no block
    skip, a sliding window) at B = 32; Gemma2-2B's soft-capped scores (8/4 heads, D 256, cap 50, an additive
    bf16 row mask) at B = 32.

    The dicts carry the ``tt.divisibility`` attrs the JIT adds at run time (pointers, and integer arguments
    that are multiples of 16 at these sizes, as every contiguous cache has). With them every case compiles
    without spills on sm_90, gfx942 and gfx950 (triton 3.6 and 3.9, 2026-12-01); without them the SGPRs
    spill on gfx942 (88-391 of them) and the D 128 / 256 cases show 144-200 bytes of stack on sm_90.
    """
    sig_common = {"sqb": "i32", "sqh": "i32", "sqi": "i32", "skb": "i32", "skh": "i32", "skn": "i32",
                  "svb": "i32", "svh": "i32", "svn": "i32", "smb": "i32", "smh": "i32", "smi": "i32",
                  "smj": "i32", "Hq": "i32", "LQ": "i32", "LKV": "i32", "SPLIT_LEN": "i32", "NSPLIT": "i32",
                  "MB": "i32", "scale": "fp32", "SOFTCAP": "fp32", "spb": "i32", "spi": "i32", "WINDOW": "i32"}
    cases = []
    # name, B, Hq, Hkv, Lq, Lkv, D, mask pointer type (None: positions, no mask), mask row-broadcast (HF decode
    # (B, 1, 1, L)), sinks, one launch, softcap
    for name, b, hq, hkv, lq, lkv, d, mdt, mrow, sinks, one, cap in (
            ("llama_b1", 1, 32, 8, 1, 1024, 64, "*u8", True, False, False, False),
            ("llama_b1_one_launch", 1, 32, 8, 1, 1024, 64, "*u8", True, False, True, False),
            ("llama_q8_b32", 32, 32, 8, 8, 128, 64, "*u8", False, False, False, False),
            ("qwen3_b1", 1, 16, 8, 1, 4096, 128, "*u8", True, False, False, False),
            ("gemma_b32", 32, 8, 1, 1, 4096, 256, "*u8", True, False, False, False),
            ("llama_additive_b8", 8, 32, 8, 1, 1024, 64, "*bf16", False, False, False, False),
            ("llama_positions_window_b32", 32, 32, 8, 1, 1024, 64, None, True, False, False, False),
            ("gpt_oss_sinks_window_b32", 32, 64, 8, 1, 128, 64, "*bf16", True, True, False, False),
            ("gemma2_softcap_b32", 32, 8, 4, 1, 4096, 256, "*bf16", True, False, False, True)):
        g = hq // hkv
        cfg = launch_config(b, hkv, lq, lkv, g, d, d, sms=132, rocm=True)
        pos = mdt is None
        sig = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "Mask": mdt or "*bf16", "Sinks": "*bf16",
               "Pos": "*i64" if pos else "*bf16", "Out": "*bf16", "OP": "*fp32", "MP": "*fp32", "LP": "*fp32",
               "Counter": "*i32" if one else "*bf16", **sig_common}
        consts = dict(HKV=hkv, G=g, D=d, DV=d, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                      BLOCK_D=cfg["BLOCK_D"], BLOCK_DV=cfg["BLOCK_DV"], HAS_MASK=not pos, MASK_BOOL=mdt == "*u8",
                      MASK_ROW=mrow, WRITE_PARTIAL=cfg["NSPLIT"] > 1, IEEE=False, UPCAST_DOT=False,
                      MANUAL_BF16=False, HAS_SINKS=sinks and (cfg["NSPLIT"] == 1 or one), HAS_POS=pos,
                      HAS_WINDOW=pos, SKIP=not pos, INLINE_COMBINE=one,
                      BLOCK_S=triton.next_power_of_2(cfg["NSPLIT"]) if one else 1, HAS_SOFTCAP=cap)
        sig.update({c: "constexpr" for c in consts})
        # The integer arguments at this size, for the divisibility hints the JIT adds at run time (a value
        # that is a multiple of 16 is specialised so; contiguous q/k/v and a (B, 1, Lq|1, L) mask).
        mi = 0 if mrow else lkv
        ints = dict(sqb=hq * lq * d, sqh=lq * d, sqi=d, skb=hkv * lkv * d, skh=lkv * d, skn=d,
                    svb=hkv * lkv * d, svh=lkv * d, svn=d, smb=0 if pos else (lq * lkv if not mrow else lkv),
                    smh=0, smi=0 if pos else mi, smj=0 if pos else 1, spb=1 if pos else 0, spi=0,
                    WINDOW=4096 if pos else 0, Hq=hq, LQ=lq, LKV=lkv, SPLIT_LEN=cfg["SPLIT_LEN"], NSPLIT=cfg["NSPLIT"],
                    MB=cfg["MB"])
        attrs = {k: [["tt.divisibility", 16]] for k, v in sig.items() if v.startswith("*")}
        attrs.update({k: [["tt.divisibility", 16]] for k, v in ints.items() if v and v % 16 == 0})
        ones = {k: 1 for k, v in ints.items() if v == 1}  # the JIT makes an int argument equal to 1 a constant
        sig.update({k: "constexpr" for k in ones})
        consts.update(ones)
        sig = {a: sig[a] for a in _split_kernel.arg_names}  # in parameter order
        case = {"name": f"decode_attention_{name}", "fn": _split_kernel, "signature": sig,
                "constexprs": consts, "num_warps": cfg["num_warps"], "attrs": attrs}
        if cfg["NSPLIT"] > 1:
            # triton 3.9, 2026-12-01: 13-29 SGPRs spill to VGPR lanes on gfx942/gfx950 (no scratch, no VGPR
            # spill): 20 integer arguments, 8 pointers and the split's 64-bit offsets pass the 106 SGPRs.
            case["known_spill"] = ("split-KV variant: SGPRs spill to VGPR lanes on gfx942/gfx950 (no scratch); "
                                   "not measured on an AMD GPU")
        elif sinks:
            # triton 3.9, 2026-12-02: GPT-OSS's 8 query heads per kv head with a row mask spill SGPRs to VGPR
            # lanes on AMD with or without sinks (gfx942: 16 without, 20 with; gfx950: 15 with; no scratch, no
            # VGPR spill); sm_90 136 registers, no stack. The sinks' combine (below) does not spill.
            case["known_spill"] = ("unsplit, 8 query heads per kv head: SGPRs spill to VGPR lanes on gfx942/gfx950 "
                                   "with or without sinks (no scratch); not measured on an AMD GPU")
        cases.append(case)
    for dv, sinks in ((64, False), (256, False), (64, True)):
        consts = dict(DV=dv, BLOCK_S=MAX_SPLITS, BLOCK_DV=dv, MANUAL_BF16=False, HAS_SINKS=sinks, LQ=1)
        sig = {"Out": "*bf16", "OP": "*fp32", "MP": "*fp32", "LP": "*fp32", "Sinks": "*bf16", "NSPLIT": "i32",
               "Hq": "i32", "LQ": "constexpr",  # LQ = 1 (decode): a constant to the JIT
               **{c: "constexpr" for c in consts if c != "LQ"}}
        cases.append({"name": f"decode_attention_combine_dv{dv}" + ("_sinks" if sinks else ""),
                      "fn": _combine_kernel, "signature": sig, "constexprs": consts,
                      "num_warps": combine_warps(MAX_SPLITS, dv)})
    return cases
