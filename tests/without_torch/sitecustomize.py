"""Makes `import torch` fail in this interpreter and every process it starts (they inherit
PYTHONPATH, which puts this directory first): tests/test_without_torch.py runs blocktune's torch-free
paths under it, as on a machine where torch is not installed."""
import importlib.abc
import sys


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: tests/without_torch)", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
