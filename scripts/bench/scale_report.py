#!/usr/bin/env python3
"""Report for scripts/bench/scale.sh: reads DIR/raw.tsv (+ env.txt, systems), prints one
Markdown table per size, the per-file time of each size against the smallest, the
targets, and RESULT<TAB>system<TAB>metric<TAB>value<TAB>unit lines.

usage: scale_report.py DIR      (env: SUBJECT [photovault], REF [gocryptfs])
"""
import csv
import os
import sys

WORKLOADS = [  # metric prefix, description
    ("create", "create: tar -xf + syncfs"),
    ("lsR_cold", "ls -lR, cold"),
    ("lsR_warm", "ls -lR, warm"),
    ("find", "find -type f, cold"),
    ("thumbs", "thumbnailer: open + read the head of every file, cold"),
    ("du", "du -s, cold"),
    ("rm", "rm -rf + syncfs"),
]
TARGET_RATIO = 1.2       # REF time / SUBJECT time, at least
TARGET_FDS = 1000        # SUBJECT's peak descriptors, at most
TARGET_GROWTH = 1.3      # SUBJECT's per-file time at a size / at the smallest, at most
TARGET_RSS_MIB = 64      # SUBJECT's peak RSS at 100,000 files, under


def fmt(x, unit=""):
    if x is None:
        return "–"
    a = abs(x)
    s = f"{x:.0f}" if a >= 1000 else f"{x:.1f}" if a >= 100 else f"{x:.2f}" if a >= 1 else f"{x:.3f}"
    return s + unit


def fmt_int(x):
    return "–" if x is None else f"{x:.0f}"


def main():
    d = sys.argv[1]
    subj = os.environ.get("SUBJECT", "photovault")
    ref = os.environ.get("REF", "gocryptfs")
    val = {}
    systems, sizes = [], []
    for row in csv.reader(open(os.path.join(d, "raw.tsv")), delimiter="\t"):
        if len(row) != 5 or row[0] == "size":
            continue
        n, s, m, v, _ = row
        n = int(n)
        if s not in systems:
            systems.append(s)
        if n not in sizes:
            sizes.append(n)
        try:
            val[(n, s, m)] = float(v)
        except ValueError:
            pass
    order = os.path.join(d, "systems")
    if os.path.exists(order):
        wanted = open(order).read().split()
        systems = [s for s in wanted if s in systems] + [s for s in systems if s not in wanted]
    sizes.sort()
    g = val.get
    out = []
    env = os.path.join(d, "env.txt")
    if os.path.exists(env):
        out += ["```"] + [line.rstrip("\n") for line in open(env)] + ["```", ""]
    misses = []
    for n in sizes:
        out.append(f"### {n:,} files")
        out.append("")
        head = ["workload"] + [f"{s} s" for s in systems]
        both = subj in systems and ref in systems
        # a ratio column for the subject and for every other system measured against REF
        # (e.g. photovault_other, the same build under another scheduling policy)
        others = [s for s in systems if s not in (ref, subj)] if ref in systems else []
        if both:
            head.append(f"{ref}/{subj}")
        head += [f"{ref}/{s}" for s in others]
        head += [f"{s} CPU s" for s in systems] + [f"{s} fds" for s in systems] + [f"{s} RSS MiB" for s in systems]
        out.append("| " + " | ".join(head) + " |")
        out.append("|---|" + "---:|" * (len(head) - 1))
        for w, desc in WORKLOADS:
            if not any((n, s, w + "_s") in val or (n, s, w + "_failed") in val for s in systems):
                continue
            cells = [desc]
            for s in systems:
                cells.append("FAILED" if (n, s, w + "_failed") in val else fmt(g((n, s, w + "_s"))))
            if both:
                a, b = g((n, ref, w + "_s")), g((n, subj, w + "_s"))
                r = a / b if a and b else None
                cells.append(f"**{r:.2f}**" if r is not None and r < TARGET_RATIO else fmt(r))
                if r is None or r < TARGET_RATIO:
                    misses.append(f"{n:,} files, {w}: {ref}/{subj} {fmt(r)} (target {TARGET_RATIO})")
            for s in others:
                a, b = g((n, ref, w + "_s")), g((n, s, w + "_s"))
                cells.append(fmt(a / b if a and b else None))
            cells += [fmt(g((n, s, w + ".cpu_s"))) for s in systems]
            cells += [fmt_int(g((n, s, w + ".fds"))) for s in systems]
            cells += [fmt(g((n, s, w + ".hwm_MiB"))) for s in systems]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        notes = []
        for s in systems:
            rb, ra = g((n, s, "forget.rss_before_MiB")), g((n, s, "forget.rss_after_MiB"))
            fb, fa = g((n, s, "forget.fds_before")), g((n, s, "forget.fds_after"))
            if rb is not None:
                notes.append(f"{s} RSS {fmt(rb)} -> {fmt(ra)} MiB, descriptors {fmt_int(fb)} -> {fmt_int(fa)}")
        if notes:
            out.append("After drop_caches (the kernel forgets every node): " + "; ".join(notes) + ".")
        peaks = [f"{s} {fmt(g((n, s, 'peak_rss_MiB')))} MiB" for s in systems if (n, s, "peak_rss_MiB") in val]
        if peaks:
            out.append("Peak RSS of the daemon over all mounts of this size: " + ", ".join(peaks) + ".")
        out.append("")
        for s in systems:
            fds = [g((n, s, w + ".fds")) for w, _ in WORKLOADS if (n, s, w + ".fds") in val]
            if s == subj and fds and max(fds) > TARGET_FDS:
                misses.append(f"{n:,} files: {subj} peak descriptors {max(fds):.0f} (target <= {TARGET_FDS})")
        rss = g((n, subj, "peak_rss_MiB"))
        if n >= 100000 and rss is not None and rss >= TARGET_RSS_MIB:
            misses.append(f"{n:,} files: {subj} peak RSS {rss:.1f} MiB (target < {TARGET_RSS_MIB})")

    if len(sizes) > 1:
        base = sizes[0]
        out.append(f"### Per-file time against {base:,} files (time per file at the size / at {base:,}; 1.00 = flat)")
        out.append("")
        head = ["workload"] + [f"{s} {n:,}" for n in sizes[1:] for s in systems]
        out.append("| " + " | ".join(head) + " |")
        out.append("|---|" + "---:|" * (len(head) - 1))
        for w, desc in WORKLOADS:
            cells, any_v = [desc], False
            for n in sizes[1:]:
                for s in systems:
                    a, b = g((base, s, w + "_s")), g((n, s, w + "_s"))
                    r = (b / n) / (a / base) if a and b else None
                    any_v |= r is not None
                    cells.append(f"**{r:.2f}**" if s == subj and r is not None and r > TARGET_GROWTH else fmt(r))
                    if s == subj and r is not None and r > TARGET_GROWTH:
                        misses.append(f"{n:,} files, {w}: {subj} per-file time {r:.2f}x that at {base:,} (target <= {TARGET_GROWTH})")
            if any_v:
                out.append("| " + " | ".join(cells) + " |")
        out.append("")

    out.append(f"Targets: {ref}/{subj} time >= {TARGET_RATIO} on every workload at every size; "
               f"{subj} descriptors <= {TARGET_FDS}; per-file time within {TARGET_GROWTH}x of the "
               f"smallest size; {subj} peak RSS < {TARGET_RSS_MIB} MiB at 100,000 files.")
    out.append("Missed: " + ("none" if not misses else ""))
    out += [f"- {m}" for m in misses]
    out.append("")
    for (n, s, m), v in sorted(val.items()):
        out.append(f"RESULT\t{s}\t{n}/{m}\t{v:g}\t")
    print("\n".join(out))


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        sys.exit(0)
