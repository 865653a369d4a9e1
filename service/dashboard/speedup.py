"""How a tuned config compares with the kernel's default config, in honest words: a speed-up within
measurement noise is no win, and a default that stays fastest is said so."""
from __future__ import annotations

from dataclasses import dataclass

# medians of repeated runs of one config differ by about 1 %; under 3 % faster is not called a win
MEANINGFUL_SPEEDUP = 1.03


@dataclass
class Speedup:
    ratio: float       # default_ms / tuned_ms
    kind: str          # "win", "even", or "loss"
    text: str


def compare(tuned_ms: float | None, default_ms: float | None) -> Speedup | None:
    if not tuned_ms or not default_ms or tuned_ms <= 0 or default_ms <= 0:
        return None
    ratio = default_ms / tuned_ms
    if ratio >= MEANINGFUL_SPEEDUP:
        return Speedup(ratio, "win", f"{ratio:.2f}× faster than the default config ({default_ms:.4f} ms)")
    if ratio > 1 / MEANINGFUL_SPEEDUP:
        return Speedup(ratio, "even", f"no gain over the default config ({ratio:.2f}×, {default_ms:.4f} ms: "
                                      f"within {100 * (MEANINGFUL_SPEEDUP - 1):.0f}% measurement noise)")
    return Speedup(ratio, "loss", f"slower than the default config ({ratio:.2f}×, {default_ms:.4f} ms)")
