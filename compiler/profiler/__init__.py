"""`triton.profiler` (proton) for blocktune: sessions, scopes and Triton's launch hook writing
proton's `.hatchet` files, and `viewer` to read them (docs/profiler.md)."""
from .session import DEFAULT_PROFILE_NAME, activate, deactivate, finalize, profile, start  # noqa: F401
from .scope import cpu_timed_scope, enter_scope, exit_scope, scope  # noqa: F401

__all__ = ["start", "activate", "deactivate", "finalize", "profile", "scope", "cpu_timed_scope", "enter_scope",
           "exit_scope", "DEFAULT_PROFILE_NAME"]
