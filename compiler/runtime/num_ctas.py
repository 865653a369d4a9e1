"""Triton's `num_ctas` launch/compile option, accepted and run as one CTA per program.

In Triton, num_ctas > 1 (sm_90+) launches each program as a thread-block cluster of that many CTAs
that share its tile: a performance choice. Triton's language has no per-CTA view of a cluster
(tl.program_id, tl.num_programs and every block op see the whole program), so a program computes
the same whether one CTA or a cluster runs it. blocktune has no clusters: it runs each program as
one CTA, and says so once, so that autotune configs listing num_ctas=2 work unchanged (their
timings are then those of num_ctas=1). See docs/compatibility.md.
"""
from __future__ import annotations

import warnings

_MAX_CLUSTER = 16     # the largest cluster an sm_90 GPU launches (non-portable size)
_warned = False


def check_num_ctas(num_ctas, target: str | None = None, stacklevel: int = 3) -> None:
    """Accept a valid num_ctas (a power of two up to 16) for `target` (sm_90+, as Triton: clusters
    are Hopper's; None: no GPU target, interpret mode); warn once that > 1 runs as one CTA."""
    global _warned
    if isinstance(num_ctas, bool) or not isinstance(num_ctas, int) or num_ctas < 1 or num_ctas & (num_ctas - 1) \
            or num_ctas > _MAX_CLUSTER:
        raise ValueError(f"num_ctas must be a power of two from 1 to {_MAX_CLUSTER} (CTAs per cluster), got {num_ctas!r}")
    digits = "".join(ch for ch in (target or "") if ch.isdigit())
    if num_ctas > 1 and digits and int(digits) < 90:     # Triton's words, which its tests match
        raise ValueError(f"num_ctas > 1 requires NVIDIA SM90+ (Hopper) thread-block clusters; the target is {target}")
    if num_ctas > 1 and not _warned:
        _warned = True
        warnings.warn(f"num_ctas={num_ctas}: blocktune has no thread-block clusters and runs each program as one CTA; "
                      "the results are the same as Triton's, the launch and its speed are those of num_ctas=1",
                      stacklevel=stacklevel)
