"""The prefill shapes gpu_compare.py times and prefill_targets.py judges: the bench's standard
four and FlashAttention-3's sweep, and their names in results. No torch here: CI imports it."""

# gllmctl bench's standard prefill shapes: (B, H, S, D, dtype, causal).
STANDARD = [(4, 32, 2048, 128, "f16", False), (4, 32, 2048, 128, "f16", True),
            (2, 32, 4096, 128, "bf16", True), (8, 16, 1024, 64, "f16", False)]


def sweep():
    """FlashAttention-3's sweep: 16k tokens (B = 16384 / S), hidden 2048 (H = 2048 / D), S 512
    to 16k, D 64 and 128, causal and not, f16 and bf16; then GQA 4:1 and 8:1 (H 32, D 128,
    bf16, S 2k and 8k). Each ((B, H, S, D, dtype, causal), Hkv), Hkv None where it is H."""
    shapes = [((16384 // S, 2048 // D, S, D, dt, c), None) for dt in ("f16", "bf16")
              for D in (64, 128) for c in (False, True)
              for S in (512, 1024, 2048, 4096, 8192, 16384)]
    shapes += [((16384 // S, 32, S, 128, "bf16", c), 32 // g) for g in (4, 8)
               for c in (False, True) for S in (2048, 8192)]
    return shapes


# A sweep shape's float64 check, as gpu_compare.py records it: the shape's name and this.
CHECKED = " heads 0,last"


def shape_name(B, H, Hkv, S, D, dtype, causal):
    """A bench shape as the results name it (Hkv only where it differs from H)."""
    return f"B{B} H{H}{f' Hkv{Hkv}' if Hkv != H else ''} S{S} D{D} {dtype}{' causal' if causal else ''}"
