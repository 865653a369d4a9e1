"""scripts/gpu-check.sh runs each benchmark as `python3 bench/NAME.py`: a script whose entry point
is lost (a refactor once dropped bench/dropout.py's `if __name__ == "__main__"`) prints nothing on
the GPU and the run's table silently lacks it."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def benchmarks_gpu_check_runs() -> list[str]:
    script = (ROOT / "scripts" / "gpu-check.sh").read_text()
    loop = re.search(r"^for b in ([\w ]+); do", script, re.M)
    assert loop, "gpu-check.sh's benchmark loop changed shape: update this test"
    names = loop.group(1).split()
    return names + (["fleet"] if "bench/fleet.py" in script else [])


def calls_main_when_run(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return any(isinstance(n, ast.Call) for n in ast.walk(node))
    return False


def test_every_benchmark_gpu_check_runs_has_an_entry_point():
    names = benchmarks_gpu_check_runs()
    assert "dropout" in names and "matmul" in names
    missing = [n for n in names if (ROOT / "bench" / f"{n}.py").exists() and not calls_main_when_run(ROOT / "bench" / f"{n}.py")]
    assert not missing, f"bench scripts that do nothing when run: {missing}"
