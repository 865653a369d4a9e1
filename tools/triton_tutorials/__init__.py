"""Triton's tutorials (python/tutorials/0[1-9]-*.py), run unchanged against blocktune
(scripts/triton-tutorials.sh).

- checks.py: what a tutorial checks against torch (its asserts and assert_close calls, the
  comparisons it prints, its pytest tests) and how its printed results read;
- harness.py: runs one tutorial file in a child process through the `triton` import shim and
  writes what happened as JSON (also the pytest plug-in that runs the tutorial's `test_*`);
- runner.py: runs the selected tutorials one by one with a timeout and prints the report.
"""
