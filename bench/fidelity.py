"""The emulator beside Apache Kafka 4.3 under the same faults: `make bench-fidelity`.

Each fault plan (bench/fidelity_runs.py) runs on a fresh real cluster, watched by `isrwatch collect`, at least
twice (real runs vary), and three times in the emulator (seeds 1-3: its timing draws vary as a real cluster's
races do) with the same topology, settings, workload and fault times. Both bronze outputs are read by the same
code (bench/fidelity_measures.py) and printed side by side. A row is within tolerance when the emulated runs' range
meets the real runs' range, or when their means are within one heartbeat interval (2 s) for times, or within
25 % for counts. `--check` exits 1 when a row is not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fidelity_measures import measure
from bench.fidelity_runs import PLANS, Outcome, Plan, run_emulated, run_real

HEARTBEAT_S = 2.0
COUNT_TOLERANCE = 0.25


def log(msg: str) -> None:
    print(f"bench fidelity: {msg}", file=sys.stderr, flush=True)


def flatten(outcome: Outcome, plan: Plan) -> dict[str, float | None]:
    """One run as rows: measure name -> number (None: did not happen)."""
    m = measure(outcome.lake, outcome.run_id, outcome.window, plan.min_isr)
    rows: dict[str, float | None] = {}
    for key, value in m.items():
        if isinstance(value, dict):
            for sub, v in sorted(value.items()):
                rows[f"{key} [{sub}]"] = v
        else:
            rows[key] = value
    rows["records acknowledged"] = outcome.acked
    rows["records failed (delivery)"] = outcome.failed
    rows["acknowledged records lost"] = outcome.lost
    return rows


def _seen(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _span(values: list[float | None]) -> tuple[float, float] | None:
    seen = _seen(values)
    return (min(seen), max(seen)) if seen else None


def within(name: str, emulated: list[float | None], real: list[float | None]) -> bool:
    """The emulated runs' range meets the real runs' range, or their means are close enough."""
    e, r = _seen(emulated), _seen(real)
    if not e or not r:
        return not e and not r
    if min(e) <= max(r) and min(r) <= max(e):
        return True
    gap = abs(statistics.mean(e) - statistics.mean(r))
    return gap <= (HEARTBEAT_S if name.endswith("_s") else COUNT_TOLERANCE * abs(statistics.mean(r)))


Row = tuple[str, list[float | None], list[float | None], bool]


def compare(real: list[dict[str, float | None]], emulated: list[dict[str, float | None]]) -> list[Row]:
    # Gauges, meters and error codes that appear on one side only are rows too: absent reads as 0.
    names = sorted(set().union(*emulated, *real), key=lambda n: (" [" in n, n))
    out = []
    for name in names:
        absent: float | None = None if name.endswith("_s") else 0
        reals = [r.get(name, absent) for r in real]
        emus = [e.get(name, absent) for e in emulated]
        out.append((name, reals, emus, within(name, emus, reals)))
    return out


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v)}"


def fmt_span(values: list[float | None]) -> str:
    span = _span(values)
    if span is None or span[0] == span[1] or None in values:
        return fmt(values[0]) if len(set(values)) == 1 else "/".join(fmt(v) for v in values)
    return f"{fmt(span[0])}..{fmt(span[1])}"


def table(plan: Plan, rows: list[Row], seeds: int) -> str:
    width = max(len(r[0]) for r in rows)
    runs = len(rows[0][1])
    head = (f"{'':{width}}  " + "  ".join(f"{'real ' + str(i + 1):>8}" for i in range(runs))
            + f"  {'emulated (' + str(seeds) + ' seeds)':>20}  ok")
    lines = [f"{plan.name}: {plan.description}", head]
    for name, reals, emus, ok in rows:
        lines.append(f"{name:{width}}  " + "  ".join(f"{fmt(r):>8}" for r in reals) + f"  {fmt_span(emus):>20}  "
                     + ("yes" if ok else "NO"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.fidelity", description=__doc__.splitlines()[0])
    parser.add_argument("--plans", nargs="*", choices=[p.name for p in PLANS], help="default: all")
    parser.add_argument("--real-runs", type=int, default=2, help="real runs per plan (default 2, at least 2)")
    parser.add_argument("--seed", type=int, default=1, help="the first emulator seed")
    parser.add_argument("--seeds", type=int, default=3, help="emulator runs per plan, seeds from --seed on")
    parser.add_argument("--workdir", type=Path, help="keep every run's lake here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write every row here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a row is outside tolerance")
    args = parser.parse_args(argv)
    if args.real_runs < 2:
        parser.error("--real-runs: at least 2 (real runs vary; the tolerance uses their range)")
    plans = [p for p in PLANS if not args.plans or p.name in args.plans]
    began = time.monotonic()
    results: dict[str, Any] = {}
    failures = 0
    with tempfile.TemporaryDirectory(prefix="isrwatch-fidelity-") as tmp:
        root = args.workdir or Path(tmp)
        for n, plan in enumerate(plans, 1):
            log(f"[{n}/{len(plans)}] {plan.name}: {args.real_runs} real runs ({plan.duration_s:.0f} s each "
                "plus cluster start), then the emulator")
            real = []
            for i in range(args.real_runs):
                outcome = run_real(plan, root / plan.name / f"real-{i + 1}", log)
                real.append(flatten(outcome, plan))
            emulated = [flatten(run_emulated(plan, root / plan.name / f"emulated-{seed}" / "lakehouse", seed), plan)
                        for seed in range(args.seed, args.seed + args.seeds)]
            rows = compare(real, emulated)
            print(table(plan, rows, args.seeds) + "\n", flush=True)
            failures += sum(not ok for *_, ok in rows)
            results[plan.name] = [{"measure": name, "real": reals, "emulated": emus, "ok": ok}
                                  for name, reals, emus, ok in rows]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    log(f"done in {time.monotonic() - began:.0f} s: {failures} rows outside tolerance")
    return 1 if args.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
