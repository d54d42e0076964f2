#!/usr/bin/env bash
# scripts/bench/scale.sh (run as `scripts/bench.sh --scale` or `SCALE=1 scripts/bench.sh`):
# PhotoVault against gocryptfs with a life's library, 10,000 and 100,000 files by default
# (1,000,000 on request), to show that time, descriptors and memory grow no faster than
# the library.
#
# Method: for each size, a tree of SCALE_FOLDERS folders of SCALE_FILE_KB KiB files (random
# data, names IMG_NNNNNN.JPG) is extracted into each system from a tarball on a tmpfs, on
# the disk backing (WORK's file system), both systems mounted side by side. Each workload
# runs on every system back to back, the order swapping from one size to the next (and
# from one workload to the next), one round. "Cold" workloads unmount, drop the kernel's
# caches and mount again first (bench.sh's `cold`). Workloads:
#   create     tar -xf of the tree into the view, then syncfs of view and backing
#   lsR_cold   ls -lR, cold              lsR_warm  ls -lR again, right after
#   forget     not timed: the daemon's RSS and descriptors before and after
#              `echo 2 > drop_caches` makes the kernel forget every node (read once
#              both have not moved for a second, a stat of the root between readings)
#   find       find -type f | wc -l, cold
#   thumbs     the thumbnailer's pattern, cold: find, then open + read the first
#              SCALE_READ_BYTES of every file (xargs head)
#   du         du -s, cold
#   rm         rm -rf of the tree, then syncfs
# While each timed workload runs, a sampler reads the daemon's /proc/PID/fd count every
# 0.1 s (peak descriptors); its VmHWM is read after each workload (peak memory; the
# daemon is a new process after each remount, so the peak is that mount's).
#
# Usage (as root):  scripts/bench.sh --scale [--report DIR]
#
# Knobs (environment variables, defaults in brackets):
#   SCALE_SIZES [10000 100000]   files per run; "10000 100000 1000000" adds a million
#                                (about 40 min more, 4.6 GB of tmpfs for its tarball,
#                                about 9 GB of disk per system; checked before it starts)
#   SCALE_FOLDERS [100]          folders the files are spread over
#   SCALE_FILE_KB [4]            size of each file
#   SCALE_READ_BYTES [4096]      bytes the thumbnailer workload reads of each file
#   SCALE_SYSTEMS [gocryptfs photovault]   also photovault_batch and photovault_other: the
#                                same build with its request threads under SCHED_BATCH
#                                (PHOTOVAULT_BATCH_WORKERS=1) or the default policy (=0),
#                                whatever its default, for an A/B of the policy in one run
#   SCALE_PHASES [create lsR_cold lsR_warm forget find thumbs du rm]
#   WORK [/tmp/photovault-scale]  scratch: tmpfs for the tarball, disk backing, mountpoints
#   OUT [bench-results/scale-<timestamp>]  raw.tsv, report.md, env.txt, logs/
#   PHOTOVAULT_BIN [], SWIFT_SCRATCH []     as for bench.sh (a release build by default)
#
# Output: one table per size (time per workload, ratio gocryptfs/PhotoVault time, > 1
# means PhotoVault is faster, daemon CPU, peak descriptors, peak RSS), a table of per-file
# time at each size against the smallest, then `RESULT` lines as bench.sh prints them.
set -uo pipefail
export LC_ALL=C

SCALE_SELF=$(readlink -f "${BASH_SOURCE[0]}")
SCALE_DIR=$(dirname "$SCALE_SELF")
: "${SCALE_SIZES:=10000 100000}"
: "${SCALE_FOLDERS:=100}"
: "${SCALE_FILE_KB:=4}"
: "${SCALE_READ_BYTES:=4096}"
: "${SCALE_SYSTEMS:=gocryptfs photovault}"
: "${SCALE_PHASES:=create lsR_cold lsR_warm forget find thumbs du rm}"
: "${WORK:=/tmp/photovault-scale}"
: "${OUT:=bench-results/scale-$(date +%Y%m%d-%H%M%S)}"
export WARM=0   # bench.sh's memory warming is for large data phases; not used here

# bench.sh's functions (systems, mounts, daemon PIDs, CPU ticks, cleanup); its main
# does not run when it is sourced
# shellcheck source=../bench.sh
source "$SCALE_DIR/../bench.sh"

# ----------------------------------------------------------------------------- recording
# raw.tsv rows: size, system, metric, value, unit (bench.sh's "round" column holds the size)
rec() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$NFILES" "$SYS" "$1" "$2" "$3" >> "$RAW"
  printf '      %-26s %10s %s\n' "$1" "$2" "$3" >&2
}

# Peak descriptors: a background sampler writes the largest /proc/PID/fd count it saw.
FDMAX_FILE=""
SAMPLER=""
fd_count() {  # fd_count PID: open descriptors, counted without a fork
  local -a f=(/proc/"$1"/fd/*)
  [ -e "${f[0]}" ] && echo "${#f[@]}" || echo 0
}
sampler_start() {
  FDMAX_FILE=$WORK/fdmax.$SYS; echo 0 > "$FDMAX_FILE"
  [ -n "$DPIDS" ] || return 0
  ( max=0
    while :; do
      n=0; for p in $DPIDS; do n=$(( n + $(fd_count "$p") )); done
      if [ "$n" -gt "$max" ]; then max=$n; echo "$max" > "$FDMAX_FILE"; fi
      sleep 0.1
    done ) &
  SAMPLER=$!
}
sampler_stop() {
  [ -n "$SAMPLER" ] && { kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null; }
  SAMPLER=""
  local n=0 p; for p in $DPIDS; do n=$(( n + $(fd_count "$p") )); done   # and once at the end
  local m; m=$(cat "$FDMAX_FILE" 2>/dev/null || echo 0)
  [ "$n" -gt "$m" ] && m=$n
  PEAK_FDS=$m
}
status_kb() {  # status_kb FIELD: the daemon's VmHWM or VmRSS (KiB), summed over DPIDS
  local p t=0 kb
  for p in $DPIDS; do kb=$(awk -v f="$1:" '$1 == f {print $2}' "/proc/$p/status" 2>/dev/null); t=$(( t + ${kb:-0} )); done
  echo "$t"
}
mib() { awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}'; }

# timed step: tstart; COMMAND; tstop $? NAME
tstart() { sync -f "$BACKROOT"; K0=$(daemon_ticks); sampler_start; T0=$EPOCHREALTIME; }
tstop() {  # tstop RC NAME
  local t1=$EPOCHREALTIME k1
  sampler_stop
  k1=$(daemon_ticks)
  if [ "$1" = 0 ]; then rec "$2_s" "$(fsub "$T0" "$t1")" s
  else log "$SYS: $2 failed (rc=$1)"; rec "$2_failed" 1 bool; fi
  [ -n "$DPIDS" ] || return 0
  rec "$2.cpu_s" "$(awk -v a="$K0" -v b="$k1" -v hz="$CLK_TCK" 'BEGIN{printf "%.2f", (b-a)/hz}')" s
  rec "$2.fds" "$PEAK_FDS" fds
  rec "$2.hwm_MiB" "$(mib "$(status_kb VmHWM)")" MiB
}

settle() { sync -f "$V"; sync -f "$C"; }

# ----------------------------------------------------------------------------- the tree
make_tarball() {  # the tree of NFILES files as one tarball on the inputs tmpfs
  local need_mb=$(( NFILES * (SCALE_FILE_KB * 1024 + 1024) / 1048576 + 64 ))
  local avail; avail=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
  [ "$need_mb" -lt $(( avail * 60 / 100 )) ] ||
    die "the tarball of $NFILES files needs ${need_mb} MiB of tmpfs, only ${avail} MiB of memory are available"
  mountpoint -q "$INPUTS" && umount "$INPUTS"
  mount_tmpfs "$INPUTS" "$need_mb"
  log "generating $NFILES files of $SCALE_FILE_KB KiB in $SCALE_FOLDERS folders (a tarball, $need_mb MiB)"
  "$PY" - "$INPUTS/tree.tar" "$NFILES" "$SCALE_FOLDERS" "$((SCALE_FILE_KB * 1024))" <<'PYEOF' || die "cannot generate the tree"
import io, os, sys, tarfile
path, n, folders, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
    for d in range(folders):
        ti = tarfile.TarInfo(f"tree/d{d:03d}"); ti.type = tarfile.DIRTYPE; ti.mode = 0o755
        tar.addfile(ti)
    block = os.urandom(1 << 20)
    for i in range(n):
        ti = tarfile.TarInfo(f"tree/d{i % folders:03d}/IMG_{i:07d}.JPG"); ti.size = size; ti.mode = 0o644
        off = (i * 4099) % (len(block) - size)
        data = block[off:off + size] if i % 64 else os.urandom(size)
        tar.addfile(ti, io.BytesIO(data))
PYEOF
  TREE_ENTRIES=$(( NFILES + SCALE_FOLDERS ))
}

check_disk() {  # refuse a size whose stores would not fit on WORK's file system with room to spare
  local per_sys_mb=$(( NFILES * (SCALE_FILE_KB + 8) / 1024 + 64 )) n=${#RUN_SYSTEMS[@]} avail
  avail=$(df -Pm "$WORK" | awk 'NR == 2 {print $4}')
  [ $(( per_sys_mb * n )) -lt $(( avail / 2 )) ] ||
    die "$NFILES files need about $(( per_sys_mb * n )) MiB on $(df -P "$WORK" | awk 'NR == 2 {print $6}'), which has $avail MiB free (at most half of it is used)"
  local ifree; ifree=$(df -Pi "$WORK" | awk 'NR == 2 {print $4}')
  [ "$ifree" = - ] || [ $(( (NFILES + SCALE_FOLDERS) * 2 * n )) -lt $(( ifree / 2 )) ] ||
    die "$NFILES files need more inodes than half of the $ifree free on WORK's file system"
}

# ----------------------------------------------------------------------------- workloads
ph_create() {
  mkdir -p "$V/tree" && rmdir "$V/tree"
  tstart; tar --no-same-owner -xf "$INPUTS/tree.tar" -C "$V" 2>> "$LOGS/$SYS.log" && settle; tstop $? create
}

count_listing() {  # count_listing FILE NAME: the listing has every entry of the tree
  local n; n=$(grep -c '^[-dl]' "$1"); rm -f "$1"
  [ "$n" = "$TREE_ENTRIES" ] || { log "$SYS: $2 saw $n entries, expected $TREE_ENTRIES"; rec "$2_verify_failed" "$n" entries; }
}

ph_lsR_cold() {
  cold || return 1
  tstart; ls -lR "$V/tree" > "$WORK/ls.out"; tstop $? lsR_cold
  count_listing "$WORK/ls.out" lsR_cold
}

ph_lsR_warm() {
  tstart; ls -lR "$V/tree" > "$WORK/ls.out"; tstop $? lsR_warm
  count_listing "$WORK/ls.out" lsR_warm
}

ph_forget() {  # does the daemon give back what the kernel forgets?
  [ -n "$DPIDS" ] || return 0
  local p=${DPIDS%% *}
  ls -lR "$V/tree" > /dev/null   # every node remembered
  rec forget.rss_before_MiB "$(mib "$(status_kb VmRSS)")" MiB
  rec forget.fds_before "$(fd_count "$p")" fds
  sync -f "$V"; echo 2 > /proc/sys/vm/drop_caches
  # the FORGETs arrive asynchronously: wait until descriptors and RSS have not moved for
  # a second (at most 30 s); one request (stat of the root) lets the daemon close the
  # descriptors it retired
  local last="" now i=0
  while now="$(fd_count "$p") $(status_kb VmRSS)"; [ "$now" != "$last" ] && [ $i -lt 30 ]; do
    last=$now; sleep 1; stat "$V" > /dev/null; i=$((i + 1))
  done
  rec forget.rss_after_MiB "$(mib "$(status_kb VmRSS)")" MiB
  rec forget.fds_after "$(fd_count "$p")" fds
}

ph_find() {
  cold || return 1
  local n
  tstart; n=$(find "$V/tree" -type f | wc -l); tstop $? find
  [ "$n" = "$NFILES" ] || log "$SYS: find saw $n files, expected $NFILES"
}

ph_thumbs() {
  cold || return 1
  local got want=$(( NFILES * (SCALE_READ_BYTES < SCALE_FILE_KB * 1024 ? SCALE_READ_BYTES : SCALE_FILE_KB * 1024) ))
  tstart; got=$(cd "$V/tree" && find . -type f -print0 | xargs -0 head -q -c "$SCALE_READ_BYTES" | wc -c); tstop $? thumbs
  [ "$got" = "$want" ] || { log "$SYS: thumbnailer read $got bytes, expected $want"; rec thumbs_verify_failed "$got" bytes; }
}

ph_du() {
  cold || return 1
  tstart; du -s "$V/tree" > /dev/null; tstop $? du
}

ph_rm() {
  tstart; rm -rf "$V/tree" && settle; tstop $? rm
}

# ----------------------------------------------------------------------------- one size
select_scale() {  # select_scale SYSTEM: bench.sh's per-system globals for this run
  SYS=$1; C=$BACKROOT/$SYS/store; M=$MNTROOT/$SYS; V=$M; DPIDS=${S_DPIDS[$SYS]:-}
}

run_size() {  # run_size N SYSTEM... (in this size's order)
  NFILES=$1; shift
  local s ph k=0 t0=$EPOCHREALTIME
  check_disk
  make_tarball
  log "=== $NFILES files: $*"
  for s in "$@"; do
    select_scale "$s"; S_OK[$s]=0
    rm -rf "${C%/store}"; mkdir -p "$C" "$M"
    if ! sys_init >> "$LOGS/$SYS.log" 2>&1; then log "$SYS: init failed (see $LOGS/$SYS.log)"; continue; fi
    do_mount || continue
    S_OK[$s]=1; S_DPIDS[$s]=$DPIDS
  done
  local -a order=("$@")
  for ph in $SCALE_PHASES; do
    for s in "${order[@]}"; do
      [ "${S_OK[$s]}" = 1 ] || continue
      select_scale "$s"
      log "  $ph on $SYS"
      "ph_$ph" || { log "$SYS: $ph left it unmounted; skipping it for the rest of this size"; S_OK[$s]=0; }
      S_DPIDS[$s]=$DPIDS
    done
    # the next workload starts with the other system
    local -a rev=(); for ((k = ${#order[@]} - 1; k >= 0; k--)); do rev+=("${order[$k]}"); done; order=("${rev[@]}")
  done
  for s in "$@"; do
    select_scale "$s"
    do_umount
    [ "${S_HWM[$s]:-0}" -gt 0 ] && rec peak_rss_MiB "$(mib "${S_HWM[$s]}")" MiB
    S_HWM[$s]=0
    rm -rf "${C%/store}"
  done
  umount "$INPUTS"
  log "$NFILES files done in $(fsub "$t0" "$EPOCHREALTIME") s"
}

scale_main() {
  case "${1:-}" in
    -h|--help) sed -n '2,/^set -uo/p' "$SCALE_SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --report) [ -f "${2:-}/raw.tsv" ] || die "usage: scripts/bench.sh --scale --report RESULTS_DIR"
              "$PY" "$SCALE_DIR/scale_report.py" "$2"; exit 0 ;;
    "") ;;
    *) die "unknown argument $1 (see scripts/bench.sh --scale --help)" ;;
  esac
  [ "$(id -u)" = 0 ] || die "must run as root (mounts, drop_caches)"
  local n ph s; for n in $SCALE_SIZES; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "SCALE_SIZES: $n is not a number of files"; done
  for ph in $SCALE_PHASES; do declare -F "ph_$ph" > /dev/null || die "unknown workload $ph"; done
  LOGS=$OUT/logs; mkdir -p "$LOGS" "$MNTROOT" || die "cannot create $OUT"
  cleanup
  trap 'sampler_stop 2>/dev/null; cleanup' EXIT
  trap 'log "interrupted; unmounting"; exit 130' INT TERM
  ensure_packages
  declare -gA DROPPED=() S_DPIDS=() S_OK=() S_HWM=()
  declare -ga RUN_SYSTEMS=()
  for s in $SCALE_SYSTEMS; do
    case $s in
      gocryptfs) RUN_SYSTEMS+=("$s") ;;
      photovault|photovault_batch|photovault_other)
        if [ -n "$PV" ] || build_photovault; then RUN_SYSTEMS+=("$s"); else DROPPED[$s]="not built"; fi ;;
      *) die "unknown system $s (scale mode knows gocryptfs, photovault, photovault_batch and photovault_other)" ;;
    esac
  done
  [ ${#RUN_SYSTEMS[@]} -gt 0 ] || die "no system left to measure"
  printf 'photovault-scale-%s' "$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" > "$PASSFILE"; chmod 600 "$PASSFILE"
  RAW=$OUT/raw.tsv; printf 'size\tsystem\tmetric\tvalue\tunit\n' > "$RAW"
  echo "${RUN_SYSTEMS[*]}" > "$OUT/systems"
  rm -rf "$DISKFS"; mkdir -p "$DISKFS"; BACKROOT=$DISKFS; BACKING_NOW=disk
  # The run's vaults are registered in a runtime directory of their own: a
  # `photovault lock` run elsewhere on the machine (another user's session, a test suite)
  # locks every vault it finds registered, and a locked vault unmounts (--on-lock default)
  export XDG_RUNTIME_DIR=$WORK/runtime
  rm -rf "$XDG_RUNTIME_DIR"; mkdir -m 700 -p "$XDG_RUNTIME_DIR"
  INPUTS=$WORK/inputs
  LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  local t0=$EPOCHREALTIME i=0 k
  for n in $SCALE_SIZES; do
    # the systems' order swaps from one size to the next
    local -a ord=("${RUN_SYSTEMS[@]}")
    if (( i % 2 )); then local -a rev=(); for ((k = ${#ord[@]} - 1; k >= 0; k--)); do rev+=("${ord[$k]}"); done; ord=("${rev[@]}"); fi
    run_size "$n" "${ord[@]}"
    i=$((i + 1))
  done
  {
    echo "date: $(date -Is)"
    echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB RAM", $2/1048576}' /proc/meminfo)"
    echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "backing: $(df -T "$DISKFS" | awk 'NR==2 {print $2 " on " $1}'); tarball on tmpfs"
    echo "tree: $SCALE_FOLDERS folders of $SCALE_FILE_KB KiB files; sizes: $SCALE_SIZES; thumbnailer reads $SCALE_READ_BYTES bytes of each"
    echo "versions: $(gocryptfs -version 2>/dev/null | head -1)"
    [ -n "$PV" ] && echo "photovault: $PV ($(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null)$(cd "$REPO" && git diff --quiet 2>/dev/null || echo '+dirty'))"
    echo "wall time: $(fsub "$t0" "$EPOCHREALTIME") s"
    for s in "${!DROPPED[@]}"; do echo "EXCLUDED: $s (${DROPPED[$s]})"; done
  } > "$OUT/env.txt"
  "$PY" "$SCALE_DIR/scale_report.py" "$OUT" | tee "$OUT/report.md"
  log "raw: $OUT/raw.tsv  report: $OUT/report.md  logs: $LOGS"
}

scale_main "$@"
