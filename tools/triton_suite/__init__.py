"""Triton's own unit tests, run against blocktune (scripts/triton-suite.sh).

- alias.py: the import hook that makes `triton.X` the very module `compiler.X`;
- shim.py: writes the shim directory (a `triton` package made of that hook, plus Triton's own
  test-support modules copied from the checkout);
- summary.py: reads the two junit XML files (Triton's interpreter, blocktune) and prints the
  comparison table and the failures grouped by their error.
"""
