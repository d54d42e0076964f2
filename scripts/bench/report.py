#!/usr/bin/env python3
"""Report for scripts/bench.sh: reads DIR/raw.tsv (+ env.txt), prints Markdown tables
and RESULT<TAB>system<TAB>metric<TAB>median<TAB>unit lines.

usage: report.py DIR [METRIC-PREFIX]      (env: SUBJECT, REF, BASE)

Ratios are medians of per-round paired ratios (values measured seconds apart in the
same round), falling back to the ratio of medians (marked *) when no round has both.
"""
import csv
import os
import signal
import statistics
import sys

LABELS = {  # metric -> (workload description, higher is better?)
    "seqwrite_MiBps": ("sequential write (dd bs=1M conv=fsync)", True),
    "seqread_MiBps": ("sequential read, cold (remount + drop_caches)", True),
    "photo_in_s": ("photo import: cp files in + syncfs", False),
    "photo_in_MiBps": ("photo import throughput", True),
    "photo_out_s": ("photo export: cp files out, cold, sha256 verified", False),
    "photo_out_MiBps": ("photo export throughput", True),
    "untar_s": ("untar source tree", False),
    "lsR_s": ("ls -lR of the tree, cold", False),
    "rm_s": ("rm -rf of the tree", False),
    "thumbs_write_s": ("thumbnail set-up: cp the small photo files in", False),
    "thumbs_s": ("thumbnailer: head of every small photo, cold", False),
    "thumbs_files_per_s": ("thumbnailer rate", True),
    "rand4k_write_iops": ("fio random 4 KiB write, buffered + end fsync", True),
    "rand4k_read_iops": ("fio random 4 KiB read, cold, buffered", True),
    "init_s": ("create filesystem (init)", False),
    "mount_s": ("mount (incl. KDF), every mount", False),
    "round_wall_s": ("wall time of one round's phases", False),
}
ORDER = list(LABELS)
NO_RATIO = {"init_s", "mount_s", "round_wall_s"}
SEQUENTIAL = {"seqwrite_MiBps", "seqread_MiBps"}
VERIFY = {"photo_verify_ok": "photo sha256 verified", "tree_verify_ok": "ls -lR saw every tree entry"}
CPU_PHASES = {
    "seqwrite": "sequential write", "seqread": "sequential read (cold)",
    "photo_in": "photo import", "photo_out": "photo export (cold)", "untar": "untar",
    "lsR": "ls -lR (cold)", "rm": "rm -rf", "thumbs_write": "thumbnail set-up writes",
    "thumbs": "thumbnailer reads (cold)", "rand4k_write": "fio random write",
    "rand4k_read": "fio random read (cold)",
}


def fmt(x):
    if x is None:
        return "–"
    a = abs(x)
    return f"{x:.0f}" if a >= 1000 else f"{x:.1f}" if a >= 100 else f"{x:.2f}" if a >= 1 else f"{x:.3f}"


def main():
    d = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else ""
    rows = [r for r in csv.reader(open(os.path.join(d, "raw.tsv")), delimiter="\t")
            if len(r) == 5 and r[0] != "round"]
    systems, units, vals, by_round = [], {}, {}, {}
    for rnd, s, m, v, u in rows:
        if s not in systems:
            systems.append(s)
        units[m] = u
        try:
            x = float(v)
        except ValueError:
            continue
        vals.setdefault((s, m), []).append(x)
        by_round[(s, m, rnd)] = x
    order_file = os.path.join(d, "systems")
    if os.path.exists(order_file):  # the order of SYSTEMS, not of the first record
        wanted = open(order_file).read().split()
        systems = [s for s in wanted if s in systems] + [s for s in systems if s not in wanted]
    rounds = sorted({r[0] for r in rows}, key=int)
    med = {k: statistics.median(v) for k, v in vals.items()}
    fuse = [s for s in systems if s != "plain"]

    # who is compared with whom: SUBJECT vs REF (all workloads), SUBJECT vs BASE (sequential)
    chain = [os.environ.get(k, dflt) for k, dflt in
             (("SUBJECT", "photovault"), ("REF", "gocryptfs"), ("BASE", "passthrough_ll"))] + ["plain"]
    present = [s for s in dict.fromkeys(chain) if s in systems]
    subj, ref, base = (present + [None, None, None])[:3]

    def ratio(m, a, b, cheaper=False):
        """paired speed ratio a vs b (>1 = a faster); cheaper=True: CPU, >1 = a uses more."""
        if a is None or b is None:
            return None, ""
        hib = LABELS.get(m, ("", True))[1]
        def r(x, y):
            if cheaper:
                return x / y
            return x / y if hib else y / x
        pairs = [r(by_round[(a, m, k)], by_round[(b, m, k)]) for k in rounds
                 if by_round.get((a, m, k)) and by_round.get((b, m, k))]
        if pairs:
            return statistics.median(pairs), ""
        if med.get((a, m)) and med.get((b, m)):
            return r(med[(a, m)], med[(b, m)]), "*"
        return None, ""

    out = []
    env = os.path.join(d, "env.txt")
    if os.path.exists(env):
        out.append("```")
        out.extend(line.rstrip("\n") for line in open(env))
        out.append("```")
        out.append("")
    out.append(f"### Medians over {len(rounds)} round(s)")
    out.append("")
    head = ["workload", "unit"] + systems
    if subj and ref:
        head.append(f"speed {subj}/{ref}")
    if subj and base:
        head.append(f"speed {subj}/{base} (seq.)")
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * 2 + "---:|" * (len(head) - 2))
    metrics = [m for m in ORDER if m in units]
    metrics += sorted(m for m in units if m not in ORDER and m not in VERIFY
                      and not m.endswith("cpu_s") and not m.startswith("peak_rss"))
    for m in metrics:
        cells = [LABELS.get(m, (m,))[0], units[m]] + [fmt(med.get((s, m))) for s in systems]
        if subj and ref:
            v, star = (None, "") if m in NO_RATIO else ratio(m, subj, ref)
            cells.append(f"{v:.2f}{star}" if v is not None else "")
        if subj and base:
            v, star = ratio(m, subj, base) if m in SEQUENTIAL else (None, "")
            cells.append(f"{v:.2f}{star}" if v is not None else "")
        out.append("| " + " | ".join(cells) + " |")
    for m, what in VERIFY.items():
        if m in units:
            cells = [what, "check"] + [("ok" if min(vals[(s, m)]) == 1 else "**FAILED**") if (s, m) in vals else "–"
                                       for s in systems]
            cells += [""] * (len(head) - len(cells))
            out.append("| " + " | ".join(cells) + " |")
    out.append("")
    if subj and ref:
        out.append(f"speed ratio = how many times faster {subj} is than the other system "
                   "(throughput: a/b; durations: b/a), median of per-round paired ratios; "
                   "* = ratio of medians.")
        out.append("")

    cpu = [m for m in (f"{p}.cpu_s" for p in CPU_PHASES) if m in units]
    if cpu and fuse:
        out.append("### FUSE daemon CPU seconds per workload (user+sys from /proc/PID/stat, median)")
        out.append("")
        head = ["workload"] + fuse + ([f"CPU {subj}/{ref}"] if subj in fuse and ref in fuse else [])
        out.append("| " + " | ".join(head) + " |")
        out.append("|---|" + "---:|" * (len(head) - 1))
        for m in cpu:
            cells = [CPU_PHASES[m[:-6]]] + [fmt(med.get((s, m))) for s in fuse]
            if subj in fuse and ref in fuse:
                v, star = ratio(m, subj, ref, cheaper=True)
                cells.append(f"{v:.2f}{star}" if v is not None else "")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        if subj in fuse and ref in fuse:
            out.append(f"CPU ratio > 1: {subj}'s daemon used more CPU than {ref}'s.")
            out.append("")

    client = [m for m in (f"{p}.client_cpu_s" for p in CPU_PHASES) if m in units]
    if client:
        out.append("### Client CPU seconds per workload (the timed tools' own user+sys, median)")
        out.append("")
        head = ["workload"] + systems + ([f"ceiling {subj}/{ref}"] if subj and ref else [])
        out.append("| " + " | ".join(head) + " |")
        out.append("|---|" + "---:|" * (len(head) - 1))
        for m in client:
            phase = m[:-len(".client_cpu_s")]
            cells = [CPU_PHASES[phase]] + [fmt(med.get((s, m))) for s in systems]
            if subj and ref:
                # a single-threaded tool's wall time is at least its own CPU time, so
                # REF's duration over SUBJECT's client CPU bounds SUBJECT's speed ratio
                dur = f"{phase}_s"
                pairs = [by_round[(ref, dur, k)] / by_round[(subj, m, k)] for k in rounds
                         if by_round.get((ref, dur, k)) and by_round.get((subj, m, k))]
                cells.append(f"{statistics.median(pairs):.2f}" if pairs else "")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        if subj and ref:
            out.append(f"ceiling = {ref}'s duration / the CPU time of the tools on {subj}, median of "
                       f"per-round values: the speed ratio {subj} would reach if the tools never "
                       "waited for it (their kernel time for page-cache fills and copies stays). "
                       "Shown for workloads timed as a duration.")
            out.append("")

    rss = [s for s in fuse if (s, "peak_rss_MiB") in vals]
    if rss:
        out.append("### Daemon peak RSS (VmHWM, largest over every mount of the run)")
        out.append("")
        out.append("| system | peak RSS MiB (max) | median of per-round peaks |")
        out.append("|---|---:|---:|")
        for s in rss:
            v = vals[(s, "peak_rss_MiB")]
            out.append(f"| {s} | {max(v):.1f} | {statistics.median(v):.1f} |")
        out.append("")

    timed = [m for m in metrics if units[m] in ("s", "MiB/s", "IOPS", "files/s") and m not in NO_RATIO]
    if len(rounds) > 1 and timed:
        out.append("### Noise: (max - min) / 2 / median per cell")
        out.append("")
        out.append("| metric | " + " | ".join(systems) + " |")
        out.append("|---|" + "---:|" * len(systems))
        for m in timed:
            cells = []
            for s in systems:
                v = vals.get((s, m))
                cells.append(f"{100 * (max(v) - min(v)) / 2 / abs(med[(s, m)]):.0f}%"
                             if v and len(v) > 1 and med[(s, m)] else "–")
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        out.append("")

    print("\n".join(out))
    for s in systems:
        for m in metrics + list(VERIFY) + cpu + client:
            if (s, m) in med:
                print(f"RESULT\t{s}\t{prefix}{m}\t{med[(s, m)]:g}\t{units[m]}")
        if (s, "peak_rss_MiB") in vals:
            print(f"RESULT\t{s}\t{prefix}peak_rss_MiB\t{max(vals[(s, 'peak_rss_MiB')]):g}\tMiB")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    main()
