"""The compiler's version (part of kernel fingerprints and cache keys)."""

__version__ = "0.1.0"
