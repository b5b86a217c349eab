"""Bounce parsing cost by input size: `python -m bench.bounce_parse_ladder [REPEATS]` prints a table per hostile shape.

Each shape of `tests.producers.bounces.pathological` (40,000 dashes in base64, a 1 MiB line, nested
MIME, thousands of parts, huge headers, ...) is generated at 10k, 20k, 40k, 80k, 160k and 1 MiB and
parsed by `worker.producers.bounces.parse.parse_report` (the best of REPEATS runs, 3 by default).
Linear cost shows as a steady ns/byte down a row, and a growth factor near 1 or below: the time from
10k to 1 MiB divided by the size ratio (a quadratic parser shows ~100). Shapes the budget refuses
(`over budget`) stop early and cost almost nothing; the last column says how each ended. No
database: this is the parser alone, which is what held the receiver's event loop.
"""

from __future__ import annotations

import sys
import time

from tests.producers.bounces.pathological import SHAPES
from worker.producers.bounces.parse import Unparseable, parse_report

SIZES = (10_000, 20_000, 40_000, 80_000, 160_000, 1 << 20)


def best_time(raw: bytes, repeats: int) -> tuple[float, str]:
    """The fastest of `repeats` parses of `raw`, in seconds, and the verdict."""
    best = float("inf")
    verdict = ""
    for _ in range(repeats):
        start = time.perf_counter()
        parsed = parse_report(raw)
        best = min(best, time.perf_counter() - start)
        verdict = parsed.reason if isinstance(parsed, Unparseable) else f"{parsed.source} report"
    return best, verdict


def ladder(repeats: int) -> list[str]:
    """The table's lines: one per shape, ms and ns/byte at each size, the growth factor, the verdict at 1 MiB."""
    head = f"{'shape':<20}" + "".join(f"{_size(s):>16}" for s in SIZES) + f"{'growth':>8}  verdict at 1 MiB"
    lines = [head, f"{'':<20}" + "".join(f"{'ms (ns/B)':>16}" for _ in SIZES), "-" * len(head)]
    for name, make in SHAPES.items():
        cells, times, verdict = [], [], ""
        for size in SIZES:
            raw = make(size)
            seconds, verdict = best_time(raw, repeats)
            times.append((seconds, len(raw)))
            cells.append(f"{seconds * 1000:>8.2f} ({seconds * 1e9 / len(raw):>4.0f})")
        (first, first_len), (last, last_len) = times[0], times[-1]
        growth = (last / max(first, 1e-9)) / (last_len / first_len)
        lines.append(f"{name:<20}" + "".join(f"{c:>16}" for c in cells) + f"{growth:>8.2f}  {verdict[:60]}")
    return lines


def _size(size: int) -> str:
    return "1 MiB" if size == 1 << 20 else f"{size // 1000}k"


def main() -> int:
    """Print the ladder."""
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(f"bounce parse cost by size (best of {repeats}; growth = time ratio / size ratio, 10k to 1 MiB)")
    for line in ladder(repeats):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
