"""Start-up benchmark: how much slower is a kvcalc command than importing its dependencies?

Times ``kvcalc size llama3-70b --ctx 128k`` against ``python -c "import typer, rich, pydantic,
yaml"`` over interleaved runs (so machine noise hits both alike) and prints the ratio of the
medians. Target: <= 1.2. Then times the registry listings, ``kvcalc gpus`` and ``kvcalc models``,
against ``kvcalc size`` (target: <= 1.1 each: with the listing cache warm they neither import
pydantic nor validate a file). With --batch, also times ``kvcalc batch --gpus 8xH100 --ctx
8k,32k,128k`` over the whole registry against ``kvcalc size`` (target: < 1.5).

    python benchmarks/startup.py [--runs 21] [--batch]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def kvcalc_command() -> list[str]:
    script = Path(sys.executable).with_name("kvcalc")
    if script.exists():
        return [str(script)]
    found = shutil.which("kvcalc")
    return [found] if found else [sys.executable, "-m", "kvcalc"]


def run_seconds(cmd: list[str]) -> float:
    env = dict(os.environ, NO_COLOR="1")
    start = time.perf_counter()
    # stderr too: `size llama3-70b --ctx 128k` warns that 128k is beyond the model's context.
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def compare(name: str, cmd: list[str], base_name: str, base: list[str], runs: int) -> float:
    run_seconds(cmd)  # warm the OS file cache and .pyc files before measuring
    run_seconds(base)
    times: dict[str, list[float]] = {"cmd": [], "base": []}
    for _ in range(runs):
        times["base"].append(run_seconds(base))
        times["cmd"].append(run_seconds(cmd))
    med_cmd, med_base = statistics.median(times["cmd"]), statistics.median(times["base"])
    ratio = med_cmd / med_base
    print(f"{base_name:<48} median {med_base * 1000:7.1f} ms")
    print(f"{name:<48} median {med_cmd * 1000:7.1f} ms")
    print(f"ratio of medians: {ratio:.3f}")
    return ratio


def compile_package() -> None:
    """Write kvcalc's bytecode first, as `pip install .` does: an editable install under
    PYTHONDONTWRITEBYTECODE=1 would otherwise recompile every module on every run and time the
    compiler, not the command. The dependencies' bytecode was written when they were installed."""
    import compileall

    import kvcalc

    compileall.compile_dir(Path(kvcalc.__file__).parent, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--batch", action="store_true", help="also time `kvcalc batch`")
    args = parser.parse_args()
    compile_package()
    kvcalc = kvcalc_command()
    imports = [sys.executable, "-c", "import typer, rich, pydantic, yaml"]
    size = [*kvcalc, "size", "llama3-70b", "--ctx", "128k"]
    ratio = compare("kvcalc size llama3-70b --ctx 128k", size, "import typer, rich, pydantic, yaml",
                    imports, args.runs)
    print(f"size start-up target <= 1.2: {'met' if ratio <= 1.2 else 'NOT met'}")
    for listing in ("gpus", "models"):
        print()
        ratio = compare(f"kvcalc {listing}", [*kvcalc, listing],
                        "kvcalc size llama3-70b --ctx 128k", size, args.runs)
        print(f"{listing} target <= 1.1 x size: {'met' if ratio <= 1.1 else 'NOT met'}")
    if args.batch:
        batch = [*kvcalc, "batch", "--gpus", "8xH100", "--ctx", "8k,32k,128k"]
        print()
        ratio = compare("kvcalc batch --gpus 8xH100 --ctx 8k,32k,128k", batch,
                        "kvcalc size llama3-70b --ctx 128k", size, args.runs)
        print(f"batch target < 1.5 x size: {'met' if ratio < 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
