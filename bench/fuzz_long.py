"""Long fuzzing campaign: runs the atheris targets of tests/fuzz/ one after another (docs/fuzzing.md).

    python bench/fuzz_long.py                                  # every target, 10 minutes each
    python bench/fuzz_long.py --targets manifest,hnsw --seconds 3600
    python bench/fuzz_long.py --list

Each target keeps its corpus in fuzz-out/corpus/<target>/ (grown run after run) and writes what it
finds to fuzz-out/crashes/<target>/; fuzz-out/ is gitignored. One target runs at a time (the fuzzers
are single-threaded and the box is shared). Prints one line per target: executions, execs/s, corpus
size, findings; exits 1 if anything was found. A finding becomes a regression test by copying its
file to tests/data/fuzz/<target>/ (tests/fuzz/test_findings.py replays them all).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ = os.path.join(ROOT, "tests", "fuzz")


def targets() -> list:
    return sorted(os.path.basename(p)[5:-3] for p in glob.glob(os.path.join(FUZZ, "fuzz_*.py")))


def run(target: str, seconds: int, out: str, rss_mb: int, timeout: int) -> dict:
    corpus = os.path.join(out, "corpus", target)
    crashes = os.path.join(out, "crashes", target)
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(crashes, exist_ok=True)
    log = os.path.join(out, f"{target}.log")
    cmd = [sys.executable, os.path.join(FUZZ, f"fuzz_{target}.py"), f"-max_total_time={seconds}",
           f"-timeout={timeout}", f"-rss_limit_mb={rss_mb}", "-print_final_stats=1",
           f"-artifact_prefix={crashes}/", corpus]
    start = time.time()
    with open(log, "w") as f:
        # a finding stops libFuzzer; keep going until the time is used (-fork would need more cores)
        while True:
            left = int(seconds - (time.time() - start))
            if left <= 0:
                break
            cmd[2] = f"-max_total_time={left}"
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=out)
            try:
                rc = proc.wait()
            except BaseException:  # Ctrl-C / SIGTERM of the campaign: stop the fuzzer too
                proc.terminate()
                proc.wait()
                raise
            if rc == 0:
                break
    with open(log, errors="replace") as f:
        text = f.read()
    execs = sum(int(x) for x in re.findall(r"stat::number_of_executed_units:\s*(\d+)", text))
    wall = time.time() - start
    return {"target": target, "execs": execs, "execs_per_s": execs / wall if wall else 0.0, "seconds": wall,
            "corpus": len(os.listdir(corpus)), "findings": sorted(os.listdir(crashes)), "log": log}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default="all", help="comma-separated target names (see --list), or all")
    ap.add_argument("--seconds", type=int, default=600, help="fuzzing time per target")
    ap.add_argument("--out", default=os.path.join(ROOT, "fuzz-out"), help="corpus / crash / log directory")
    ap.add_argument("--rss-mb", type=int, default=3000, help="memory an execution may use (a finding beyond)")
    ap.add_argument("--timeout", type=int, default=20, help="seconds one execution may take (a hang beyond)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # terminate: as Ctrl-C (the fuzzer stops too)
    names = targets()
    if args.list:
        print("\n".join(names))
        return 0
    chosen = names if args.targets == "all" else [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(chosen) - set(names)
    if unknown:
        ap.error(f"unknown targets {sorted(unknown)}; targets are {names}")
    os.makedirs(args.out, exist_ok=True)
    found = False
    print(f"{'target':<18}{'seconds':>8}{'execs':>12}{'execs/s':>10}{'corpus':>8}  findings")
    for t in chosen:
        r = run(t, args.seconds, args.out, args.rss_mb, args.timeout)
        found |= bool(r["findings"])
        print(f"{t:<18}{r['seconds']:>8.0f}{r['execs']:>12}{r['execs_per_s']:>10.0f}{r['corpus']:>8}  "
              f"{', '.join(r['findings']) or '-'}", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
