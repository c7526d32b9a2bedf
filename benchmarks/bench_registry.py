"""Time to load and validate the whole registry (target: under 0.5 s on 2 cores).

Measures, in this process: (a) the reference, plain `yaml.safe_load` of every registry file plus
reported.yaml (the floor any loader pays); (b) `Registry()` + `validate()` (every spec resolved under every
preset, tables, figures, reported.yaml, profiles). Median of --repeat runs. Then (c) a cold process:
`python reproduce.py validate` wall time, imports included (median of --cold runs).

    .venv/bin/python benchmarks/bench_registry.py [--repeat 7] [--cold 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from exoformer.registry.registry import DEFAULT_REGISTRY, Registry  # noqa: E402
from exoformer.registry.reported import DEFAULT_REPORTED  # noqa: E402
from exoformer.registry.validate import validate  # noqa: E402

TARGET_S = 0.5


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--cold", type=int, default=3)
    args = parser.parse_args()
    files = [p for p in DEFAULT_REGISTRY.glob("*.yaml") if p.name != "variants.yaml"] + [DEFAULT_REPORTED]

    def reference() -> None:
        for p in files:
            yaml.safe_load(p.read_text())

    def full() -> dict:
        return validate(Registry())

    summary = full()
    ref = _median_time(reference, args.repeat)
    warm = _median_time(full, args.repeat)
    cold = []
    for _ in range(args.cold):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "reproduce.py", "validate"], cwd=REPO, check=True, capture_output=True)
        cold.append(time.perf_counter() - t0)
    cold_s = statistics.median(cold)
    print(f"registry: {summary['specs']} specs, {summary['tables']} tables, {summary['figures']} figures, "
          f"{len(files)} files")
    print(f"reference yaml.safe_load of all files : {ref * 1e3:8.1f} ms (median of {args.repeat})")
    print(f"load + validate, in process           : {warm * 1e3:8.1f} ms (median of {args.repeat}; "
          f"{warm / ref:.1f}x the reference)")
    print(f"`reproduce.py validate`, cold process  : {cold_s * 1e3:8.1f} ms (median of {args.cold}, imports included)")
    verdict = "PASS" if warm < TARGET_S else "FAIL"
    print(f"target < {TARGET_S * 1e3:.0f} ms for load + validate: {verdict}")
    return 0 if warm < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
