"""datagen -> parquet on the spark engine: events/s and micro-batch latency, local[1] vs local[2].

    python benchmarks/datagen_to_parquet_spark.py --events 400000 --event-size 1000
    python benchmarks/datagen_to_parquet_spark.py --events 300000 --rate 10000 --masters 'local[2]'

Each run is a fresh ``cdcflow run`` of a bounded datagen pipeline. Steady-state throughput is the
events of every batch but the first (which pays for Spark's and the Python workers' start) over
those batches' execution time, as Spark's progress reports them. With ``--rate`` the source
produces that many events per second and a batch runs each second: its latency is the batch
latency at steady state.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCH_LINE = re.compile(r"batch (\d+): (\d+) events in (\d+) ms")


def run(master: str, events: int, event_size: int, per_read: int, rate: float | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "bench.yaml"
        file.write_text(
            "name: bench-parquet\n"
            f"source: {{type: datagen, count: {events}, partitions: 4, event_size: {event_size}, "
            f"rate: {rate or 'null'}}}\n"
            "sink: {type: parquet, path: out}\n"
            "checkpoint: {type: file, path: ckpt}\n"
            # A backlog runs batches back to back; a steady rate triggers once a second.
            f"engine: {{type: spark, master: '{master}', trigger_interval_ms: {1000 if rate else 0}, "
            f"max_records_per_read: {per_read}}}\n"
        )
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "cdcflow.cli", "run", str(file), "--log-level", "INFO"],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - started
        if result.returncode != 0:
            raise SystemExit(result.stderr[-3000:])
    batches = [(int(e), int(ms)) for _, e, ms in BATCH_LINE.findall(result.stderr)]
    steady = batches[1:] or batches
    steady_events, steady_ms = sum(e for e, _ in steady), sum(ms for _, ms in steady)
    return {
        "wall_s": round(wall, 1),
        "events_per_s_wall": round(events / wall),
        "batches": len(batches),
        "events_per_s_steady": round(steady_events / (steady_ms / 1000)) if steady_ms else 0,
        "batch_latency_p50_ms": statistics.median(ms for _, ms in steady) if steady else 0,
        "batch_latency_max_ms": max((ms for _, ms in steady), default=0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--event-size", type=int, default=1000)
    parser.add_argument("--max-records-per-read", type=int, default=25_000, help="per partition and batch")
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--rate", type=float, help="events/s: steady-state batches instead of a backlog")
    args = parser.parse_args()
    for master in args.masters.split(","):
        numbers = run(master, args.events, args.event_size, args.max_records_per_read, args.rate)
        pace = f" at {args.rate:.0f} events/s" if args.rate else " (backlog)"
        print(f"{master}: {args.events} events of {args.event_size} B{pace}")
        for name, value in numbers.items():
            print(f"  {name:>22}: {value}")


if __name__ == "__main__":
    main()
