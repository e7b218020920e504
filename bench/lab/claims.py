#!/usr/bin/env python3
"""The seeds' claims, band by band (docs/lab.md, issue 38 item 4), from `ropekit eval` outputs.

    claims.py TABLE.csv PLANS.csv [BETA.csv] [TEMPERATURE.csv]

TABLE.csv: `ropekit eval --csv` of the methods (orig and restart among them); PLANS.csv: `--plans` of the same
methods; BETA.csv / TEMPERATURE.csv: the YaRN sweeps of bench/lab/claims.sh. Prints Markdown: per method and
scale, what it does to the 24 pairs (kept / blended / interpolated, the pairs with less than one turn over L0),
the per-bucket NLL change against orig and against restart, and the sweeps' best settings. Standard library
only (Debian's python3).
"""
import csv
import math
import sys
from collections import defaultdict


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def nll_table(rows):
    """{(method, N): {(lo, hi): (mean_nll, tokens)}}"""
    out = defaultdict(dict)
    for r in rows:
        out[(r["method"], int(r["N"]))][(int(r["bucket_lo"]), int(r["bucket_hi"]))] = (
            float(r["mean_nll"]), int(r["tokens"]))
    return out


def bucket_name(b):
    return f"{b[0]}–{b[1]}"


def deltas(table, method, n, against):
    """Per bucket: NLL(method) − NLL(against), in nats; None where a bucket is missing."""
    mine, ref = table.get((method, n), {}), table.get((against, n), {})
    return {b: mine[b][0] - ref[b][0] for b in mine if b in ref}


def plan_summary(plans, method, n):
    pairs = [p for p in plans if p["method"] == method and int(p["N"]) == n]
    if not pairs:
        return None
    scale = float(pairs[0]["scale"])
    kept = [p for p in pairs if p["kept"] and float(p["kept"]) > 0.999]
    interp = [p for p in pairs if p["kept"] and float(p["kept"]) < 0.001]
    blended = [p for p in pairs if p["kept"] and 0.001 <= float(p["kept"]) <= 0.999]
    below_turn = [int(p["pair"]) for p in pairs if float(p["turns_L0"]) < 1]

    def span(ps):
        ids = [int(p["pair"]) for p in ps]
        return f"{min(ids)}–{max(ids)}" if ids else "—"

    weights = ", ".join(f"{int(p['pair'])}:{float(p['kept']):.2f}" for p in blended)
    return {
        "scale": scale,
        "kept": f"{len(kept)} ({span(kept)})",
        "blended": f"{len(blended)} ({span(blended)})" + (f" [{weights}]" if weights and len(blended) <= 12 else ""),
        "interpolated": f"{len(interp)} ({span(interp)})",
        "below_one_turn": f"{min(below_turn)}–{max(below_turn)}" if below_turn else "—",
        "divisor_last": float(pairs[-1]["divisor"]),
    }


def main():
    table_rows = read_rows(sys.argv[1])
    plans = read_rows(sys.argv[2])
    table = nll_table(table_rows)
    methods = sorted({m for m, _ in table}, key=lambda m: [r["method"] for r in table_rows].index(m))
    lengths = sorted({n for _, n in table})
    print("## Pairs and NLL change per method (nats; + is worse)\n")
    for n in lengths:
        buckets = sorted({b for (m, nn), bs in table.items() if nn == n for b in bs})
        print(f"**N = {n}** — Δ NLL against orig / against restart, by target bucket\n")
        print("| method | kept | blended [kept weight] | interpolated by 1/s | " +
              " | ".join(bucket_name(b) for b in buckets) + " |")
        print("|---|---|---|---|" + "---:|" * len(buckets))
        for m in methods:
            if m in ("orig", "restart"):
                continue
            summary = plan_summary(plans, m, n)
            d_orig, d_restart = deltas(table, m, n, "orig"), deltas(table, m, n, "restart")
            cells = []
            for b in buckets:
                if b in d_orig and b in d_restart:
                    cells.append(f"{d_orig[b]:+.3f} / {d_restart[b]:+.3f}")
                else:
                    cells.append("")
            if summary:
                print(f"| {m} | {summary['kept']} | {summary['blended']} | {summary['interpolated']} | " +
                      " | ".join(cells) + " |")
            else:
                print(f"| {m} | | | | " + " | ".join(cells) + " |")
        print()
    for path, title in ((sys.argv[3] if len(sys.argv) > 3 else None, "YaRN's ramp: β_fast × β_slow"),
                        (sys.argv[4] if len(sys.argv) > 4 else None, "YaRN's temperature: √(1/t)")):
        if not path:
            continue
        sweep = nll_table(read_rows(path))
        print(f"## {title} — mean NLL by bucket (nats), best per bucket marked *\n")
        for n in sorted({n for _, n in sweep}):
            names = [m for m, nn in sweep if nn == n]
            buckets = sorted({b for m in names for b in sweep[(m, n)]})
            best = {b: min(sweep[(m, n)][b][0] for m in names if b in sweep[(m, n)]) for b in buckets}
            print(f"**N = {n}**\n")
            print("| method | " + " | ".join(bucket_name(b) for b in buckets) + " | mean over targets |")
            print("|---|" + "---:|" * (len(buckets) + 1))
            for m in names:
                row = sweep[(m, n)]
                total = sum(row[b][0] * row[b][1] for b in row) / sum(row[b][1] for b in row)
                cells = [(f"{row[b][0]:.4f}" + ("*" if abs(row[b][0] - best[b]) < 1e-12 else "")) if b in row else ""
                         for b in buckets]
                print(f"| {m} | " + " | ".join(cells) + f" | {total:.4f} |")
            print()
    if len(sys.argv) > 4:
        print("0.1 ln s + 1 at s = 2, 4, 8: " + ", ".join(f"{0.1 * math.log(s) + 1:.3f}" for s in (2, 4, 8)))


if __name__ == "__main__":
    main()
