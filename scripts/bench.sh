#!/usr/bin/env bash
# scripts/bench.sh: benchmark PhotoVault side by side with gocryptfs, libfuse's
# non-encrypting passthrough_ll and the bare backing directory ("plain").
#
# Method: every system gets a fresh backing directory each round and all of them are
# mounted side by side.  Each phase runs on every system back to back (the order changes
# each round, reversed every other round: A B C D, D C B A, C D A B, B A D C, ..., so
# systems next to each other in SYSTEMS, gocryptfs and photovault by default, swap places
# from one round to the next), so values that get compared
# were taken seconds apart on the same (possibly shared and noisy) machine.  Before every
# timed step of every system, an untimed step writes and deletes as much memory as the
# step may allocate (WARM), so that no system inherits warmer free memory than another
# (see "Noise" in docs/PERFORMANCE.md).  Medians over ROUNDS;
# ratios are medians of the per-round paired ratios.  "Cold" phases unmount, drop the
# kernel caches (echo 3 > /proc/sys/vm/drop_caches) and mount again first, so neither
# the kernel's page cache of the FUSE view nor a daemon's private cache can serve them.
# Inputs (photos, thumbnails, tarball) live on a separate tmpfs, so reading them never
# touches the disk whatever the backing store is.
#
# Usage (as root, from anywhere in the repository):
#   scripts/bench.sh                 build PhotoVault (release), run, print the report
#   scripts/bench.sh --report DIR    re-print the report of an earlier run from DIR
#   scripts/bench.sh --scale         (or SCALE=1) the scale mode: 10k and 100k files against
#                                    gocryptfs; see scripts/bench/scale.sh (--scale --help)
#   scripts/bench.sh --help
#
# Knobs (environment variables, defaults in brackets):
#   SYSTEMS [plain passthrough_ll gocryptfs photovault]
#   PHASES  [seqwrite seqread photo_in photo_out untar lsR rm thumbs fio]
#   BACKING [both]       tmpfs | disk | both  (where the backing/cipher directories live):
#                        tmpfs shows what each daemon's code costs (the targets are set
#                        there), disk what a user sees.  With both, the tmpfs pass runs
#                        SYSTEMS and PHASES for ROUNDS rounds, then the disk pass runs
#                        DISK_SYSTEMS and DISK_PHASES for DISK_ROUNDS rounds, so that the
#                        default run stays within 10 minutes (7.5 on a quiet machine here);
#                        BACKING=disk alone runs SYSTEMS and PHASES for ROUNDS rounds
#   ROUNDS [3]           rounds; medians are reported
#   DISK_SYSTEMS [gocryptfs photovault]  disk pass of BACKING=both (those also in SYSTEMS)
#   DISK_PHASES [seqwrite seqread photo_in photo_out thumbs]  its workloads (those also
#                        in PHASES): what a user of a photo vault waits for on disk
#   DISK_ROUNDS [1]      rounds of that disk pass (one round takes about 60 s here;
#                        DISK_ROUNDS=3 for medians, DISK_PHASES="$PHASES" for everything)
#   SIZE_MB [1024]       sequential write/read file size
#   PHOTOS [200]         photo files, random data, PHOTO_MIN_KB..PHOTO_MAX_KB [3072..6144]
#   THUMBS [5000]        files for the thumbnailer phase, THUMB_KB [200] each; the phase
#                        reads the first THUMB_READ_KB [64] KiB of each one
#   TREE_SRC [/usr/include]  directory tarred once for untar / ls -lR / rm -rf
#   FIO_SIZE_MB [256]    file for random 4 KiB I/O;  FIO_RUNTIME [4] s cap per fio job
#                        (a job also ends after one pass over the file)
#   WARM [1]             0 = no memory-warming step before each timed step, as runs
#                        before 2026-12-04's W1 were made (the order alternates either way)
#   QUICK [0]            1 = smoke test: ROUNDS=1 SIZE_MB=128 PHOTOS=20 THUMBS=500
#                        FIO_SIZE_MB=64 FIO_RUNTIME=2 (explicit knobs still win)
#   SUBJECT [photovault] REF [gocryptfs] BASE [passthrough_ll]
#                        ratio columns: SUBJECT vs REF for every workload, SUBJECT vs BASE
#                        for the sequential ones.  Without photovault in the run the
#                        columns fall back to gocryptfs vs passthrough_ll vs plain.
#   WORK [/tmp/photovault-bench]   scratch: tmpfs mounts, disk backing, mountpoints
#   DISK [$WORK/disk]    backing directory of BACKING=disk; may be the top of a mounted
#                        drive outside WORK (an exFAT image: docs/STORAGE.md): its contents
#                        are removed before and after, never the directory itself
#   OUT [bench-results/<timestamp>] raw.tsv, report.md, env.txt, logs/ (relative to the
#                        repository root unless absolute)
#   PHOTOVAULT_BIN []    use this binary instead of building one
#   SWIFT_SCRATCH []     --scratch-path for `swift build` (default: SwiftPM's .build)
#
# Output: Markdown tables (medians; speed ratios SUBJECT/REF and SUBJECT/BASE; FUSE daemon
# CPU seconds per workload from /proc/PID/stat utime+stime; the timed tools' own CPU seconds,
# with the ceiling they put on the speed ratio; daemon peak RSS from VmHWM),
# then one `RESULT<TAB>system<TAB>metric<TAB>median<TAB>unit` line per metric (for
# peak_rss_MiB the value is the maximum over the run; with BACKING=both metrics are
# prefixed tmpfs/ or disk/).  OUT holds raw.tsv (every value of every round), env.txt,
# report.md, logs/ (daemon output, fio JSON, swift build log).
# Runs take the whole of WORK: do not start two at once with the same WORK.
#
# PhotoVault is driven through its CLI only:
#   photovault init --store S; photovault user add bench --store S --passfile P;
#   photovault mount M --store S --user bench --passfile P; photovault unmount M
# If it cannot be built, initialised or mounted, it is dropped from the run with a
# message and the other systems are still measured.
set -uo pipefail
export LC_ALL=C

SELF=$(readlink -f "${BASH_SOURCE[0]}")
SCRIPT_DIR=$(dirname "$SELF")
REPO=$(cd "$SCRIPT_DIR/.." && pwd)

# ----------------------------------------------------------------------------- knobs
: "${QUICK:=0}"
if [ "$QUICK" = 1 ]; then
  : "${ROUNDS:=1}" "${SIZE_MB:=128}" "${PHOTOS:=20}" "${THUMBS:=500}" "${FIO_SIZE_MB:=64}" "${FIO_RUNTIME:=2}"
fi
: "${SYSTEMS:=plain passthrough_ll gocryptfs photovault}"
: "${PHASES:=seqwrite seqread photo_in photo_out untar lsR rm thumbs fio}"
: "${BACKING:=both}"
: "${ROUNDS:=3}"
: "${DISK_SYSTEMS:=gocryptfs photovault}"
: "${DISK_ROUNDS:=1}"
: "${DISK_PHASES:=seqwrite seqread photo_in photo_out thumbs}"
: "${SIZE_MB:=1024}"
: "${PHOTOS:=200}"
: "${PHOTO_MIN_KB:=3072}"
: "${PHOTO_MAX_KB:=6144}"
: "${THUMBS:=5000}"
: "${THUMB_KB:=200}"
: "${THUMB_READ_KB:=64}"
: "${TREE_SRC:=/usr/include}"
: "${FIO_SIZE_MB:=256}"
: "${FIO_RUNTIME:=4}"
: "${SUBJECT:=photovault}"
: "${REF:=gocryptfs}"
: "${BASE:=passthrough_ll}"
: "${WORK:=/tmp/photovault-bench}"
: "${OUT:=bench-results/$(date +%Y%m%d-%H%M%S)}"
: "${PHOTOVAULT_BIN:=}"
: "${SWIFT_SCRATCH:=}"
: "${MOUNT_TIMEOUT:=60}"
: "${UMOUNT_TIMEOUT:=120}"
: "${WARM:=1}"
case $OUT in /*) ;; *) OUT=$REPO/$OUT ;; esac
case $WORK in /*) ;; *) echo "WORK must be an absolute path" >&2; exit 1 ;; esac

INPUTS=$WORK/inputs          # tmpfs: photos, thumbnails, tarball, export target
RAMFS=$WORK/ram              # tmpfs: backing store for BACKING=tmpfs
WARMFS=$WORK/warm            # tmpfs: warm_memory's scratch files
DISKFS=${DISK:-$WORK/disk}   # plain directory (WORK's filesystem, or DISK) for BACKING=disk
MNTROOT=$WORK/mnt            # FUSE mountpoints (never inside a tmpfs we unmount)
BIN=$WORK/bin
PASSFILE=$WORK/passfile
CLK_TCK=$(getconf CLK_TCK)
PY=/usr/bin/python3
PV=""                        # photovault binary, once built
WARM_MB=0                    # size of the warming tmpfs (prepare_inputs)

log()  { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die()  { log "ERROR: $*"; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
only_listed() {  # only_listed "LIST" WORD...: the WORDs that are in LIST, in their order
  local w out=(); for w in "${@:2}"; do [[ " $1 " == *" $w "* ]] && out+=("$w"); done; echo "${out[*]}"
}
fsub() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", b-a}'; }
rate() { awk -v n="$1" -v t="$2" 'BEGIN{ if (t > 0) printf "%.1f", n/t; else print "NA"}'; }
is_fuse() { [ "$1" != plain ]; }

# ----------------------------------------------------------------------------- dependencies
ensure_packages() {  # install what is missing; apt-get update only if something is
  local -a need=()
  have gocryptfs   || need+=(gocryptfs)
  have fio         || need+=(fio)
  have fusermount3 || need+=(fuse3)
  have gcc         || need+=(gcc)
  have pkg-config  || need+=(pkg-config)
  have mountpoint  || need+=(util-linux)
  have openssl     || need+=(openssl)
  [ -x "$PY" ]     || need+=(python3)
  [ -f /usr/include/fuse3/fuse_lowlevel.h ] && [ -d /usr/share/doc/libfuse3-dev/examples ] || need+=(libfuse3-dev)
  [ ${#need[@]} = 0 ] && return 0
  log "installing missing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq "${need[@]}" >/dev/null ||
    die "apt-get install ${need[*]} failed"
}

build_passthrough_ll() {
  local ex=/usr/share/doc/libfuse3-dev/examples src=$BIN/passthrough_ll.c
  [ -x "$BIN/passthrough_ll" ] && return 0
  mkdir -p "$BIN"
  if [ -f "$ex/passthrough_ll.c" ]; then cp "$ex/passthrough_ll.c" "$src"
  elif [ -f "$ex/passthrough_ll.c.gz" ]; then zcat "$ex/passthrough_ll.c.gz" > "$src"
  else return 1; fi
  # the example includes passthrough_helpers.h (not used by the _ll variant's code paths
  # we need, but it must be found); the HAVE_* macros normally come from libfuse's config.h
  if [ -f "$ex/passthrough_helpers.h" ]; then cp "$ex/passthrough_helpers.h" "$BIN/"
  elif [ -f "$ex/passthrough_helpers.h.gz" ]; then zcat "$ex/passthrough_helpers.h.gz" > "$BIN/passthrough_helpers.h"; fi
  # shellcheck disable=SC2046
  gcc -O2 -Wall -DHAVE_FALLOCATE -DHAVE_COPY_FILE_RANGE -I"$BIN" $(pkg-config fuse3 --cflags) \
      "$src" -o "$BIN/passthrough_ll" $(pkg-config fuse3 --libs) > "$BIN/passthrough_ll.build.log" 2>&1
}

build_photovault() {  # sets PV or returns 1 with a message
  if [ -n "$PHOTOVAULT_BIN" ]; then
    [ -x "$PHOTOVAULT_BIN" ] || { log "photovault: PHOTOVAULT_BIN=$PHOTOVAULT_BIN is not executable"; return 1; }
    PV=$(readlink -f "$PHOTOVAULT_BIN"); return 0
  fi
  local swift; swift=$(command -v swift || echo /opt/swift/usr/bin/swift)
  [ -x "$swift" ] || { log "photovault: no swift toolchain found"; return 1; }
  local -a flags=(-c release)
  [ -z "$SWIFT_SCRATCH" ] || flags+=(--scratch-path "$SWIFT_SCRATCH")
  log "building PhotoVault: swift build ${flags[*]} (log: $OUT/logs/swift-build.log)"
  if ! (cd "$REPO" && "$swift" build "${flags[@]}") > "$OUT/logs/swift-build.log" 2>&1; then
    log "photovault: release build FAILED, see $OUT/logs/swift-build.log (tail below); photovault is excluded"
    tail -n 15 "$OUT/logs/swift-build.log" >&2
    return 1
  fi
  PV=$(cd "$REPO" && "$swift" build "${flags[@]}" --show-bin-path)/photovault
  [ -x "$PV" ] || { log "photovault: build succeeded but $PV is missing; photovault is excluded"; return 1; }
}

# ----------------------------------------------------------------------------- mounts of our own
mount_tmpfs() {  # mount_tmpfs DIR SIZE_MB
  mkdir -p "$1"
  mountpoint -q "$1" && umount "$1"
  mount -t tmpfs -o "size=${2}m,mode=0755" photovault-bench "$1" || die "cannot mount tmpfs on $1"
}

cleanup() {  # unmount everything under WORK (FUSE first, then tmpfs), deepest first
  local m
  for m in $(awk -v w="$MNTROOT/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do
    fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  for m in $(awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  rm -f "$PASSFILE"
  clear_disk   # disk backing data of an interrupted run (no mount is left above it now)
}

# Empties DISKFS, keeping the directory: it may be a drive's mountpoint (DISK).
clear_disk() { [ -d "$DISKFS" ] && find "$DISKFS" -mindepth 1 -maxdepth 1 -exec rm -rf {} + ; return 0; }

# Only the backing fs is synced (a global sync would also flush other tenants' data):
# drop_caches drops clean pages only, and the FUSE view's pages were flushed by unmount.
drop_caches() { sync -f "$BACKROOT"; echo 3 > /proc/sys/vm/drop_caches; }

# ----------------------------------------------------------------------------- inputs
prepare_inputs() {
  local need_mb
  # photos (+ an export copy) + thumbnails + tarball + its reference extraction + slack
  need_mb=$(( PHOTOS * PHOTO_MAX_KB * 2 / 1024 + THUMBS * THUMB_KB / 1024 + 3 * $(du -sm "$TREE_SRC" | cut -f1) + 256 ))
  mount_tmpfs "$INPUTS" "$need_mb"
  printf 'photovault-bench-%s' "$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" > "$PASSFILE"; chmod 600 "$PASSFILE"

  # incompressible content from an AES-CTR keystream: as good as /dev/urandom for a file
  # system (nothing compresses or dedups it) and several times faster to produce
  exec 3< <(openssl enc -aes-128-ctr -nosalt -pbkdf2 -pass pass:photovault-bench -in /dev/zero 2>/dev/null)
  log "generating $PHOTOS photos of $PHOTO_MIN_KB-$PHOTO_MAX_KB KiB (random data)"
  mkdir -p "$INPUTS/photos"
  awk -v n="$PHOTOS" -v lo="$PHOTO_MIN_KB" -v hi="$PHOTO_MAX_KB" \
      'BEGIN{srand(20240601); for (i = 1; i <= n; i++) printf "IMG_%04d.JPG %d\n", i, lo + int(rand() * (hi - lo + 1))}' |
  while read -r name kb; do head -c "${kb}K" <&3 > "$INPUTS/photos/$name"; done
  # openssl's SHA-256 uses the CPU's SHA extensions; coreutils' sha256sum is ~5x slower.
  # The manifest is in `sha256sum -c` format ("HASH *NAME").
  (cd "$INPUTS/photos" && openssl dgst -sha256 -r IMG_*) > "$INPUTS/photos.sha256"
  PHOTO_MB=$(du -sm --apparent-size "$INPUTS/photos" | cut -f1)

  log "generating $THUMBS thumbnail-source files of $THUMB_KB KiB"
  mkdir -p "$INPUTS/thumbs"
  head -c "$((THUMBS * THUMB_KB))K" <&3 |
    (cd "$INPUTS/thumbs" && split -b "${THUMB_KB}K" -a 5 -d --additional-suffix=.JPG - P)
  exec 3<&-
  THUMB_MB=$(( THUMBS * THUMB_KB / 1024 ))

  log "tarring $TREE_SRC"
  tar -C "$(dirname "$TREE_SRC")" -cf "$INPUTS/tree.tar" "$(basename "$TREE_SRC")" 2>/dev/null ||
    die "cannot tar $TREE_SRC"
  mkdir -p "$INPUTS/tree-ref"
  tar --no-same-owner -xf "$INPUTS/tree.tar" -C "$INPUTS/tree-ref"
  TREE_ENTRIES=$(ls -lR "$INPUTS/tree-ref" | grep -c '^[-dl]')
  TREE_FILES=$(find "$INPUTS/tree-ref" -type f | wc -l)
  TREE_MB=$(du -sm --apparent-size "$INPUTS/tree-ref" | cut -f1)
  rm -rf "$INPUTS/tree-ref"
  # warm_memory's largest step, + slack (empty between steps)
  if [ "$WARM" = 1 ]; then
    local w=$SIZE_MB n
    for n in "$PHOTO_MB" "$THUMB_MB" "$FIO_SIZE_MB" "$TREE_MB"; do [ "$n" -gt "$w" ] && w=$n; done
    WARM_MB=$(( w * 2 + 64 ))
    mount_tmpfs "$WARMFS" "$WARM_MB"
  fi
}

backing_size_mb() {  # tmpfs size for all systems' backing dirs at the same time
  local big=$SIZE_MB n
  for n in "$PHOTO_MB" "$THUMB_MB" "$FIO_SIZE_MB"; do [ "$n" -gt "$big" ] && big=$n; done
  # at most one big data set per system at a time (phases delete their files), +15 %
  # for encryption overhead and metadata, plus the small-files tree
  echo $(( ${#PASS_SYSTEMS[@]} * (big * 115 / 100 + TREE_MB * 2 + 64) + 256 ))
}

check_memory() {  # refuse to start a tmpfs run that would push the box into OOM
  local want=$1 avail
  avail=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
  if [ "$want" -gt $(( avail * 70 / 100 )) ]; then
    die "tmpfs backing (and WARM) needs up to ${want} MiB but only ${avail} MiB are available; use BACKING=disk, WARM=0 or smaller SIZE_MB/PHOTOS/THUMBS"
  fi
}

# ----------------------------------------------------------------------------- systems
# Per-system globals after select_sys: SYS C (backing dir) M (mountpoint) V (view) DPIDS
sys_init() {
  case $SYS in
    plain|passthrough_ll) : ;;
    gocryptfs) gocryptfs -init -q -passfile "$PASSFILE" "$C" ;;
    photovault|photovault_batch|photovault_other)
      # the store directory is handed over empty; retry without it if init wants to create it
      "$PV" init --store "$C" || { rmdir "$C" && "$PV" init --store "$C"; } || return 1
      # `user add` prints a recovery key: keep it out of the logs
      "$PV" user add bench --store "$C" --passfile "$PASSFILE" > /dev/null ;;
  esac
}

sys_mount() {
  case $SYS in
    passthrough_ll) "$BIN/passthrough_ll" -o source="$C" "$M" ;;   # defaults: cache=auto, timeout=1.0, no writeback
    gocryptfs) gocryptfs -q -nosyslog -passfile "$PASSFILE" "$C" "$M" ;;
    # --no-dbus: the bench's vaults do not follow the desktop session's lock. On the shared
    # machine another session's tests send lock signals, and a locked vault unmounts: the
    # 300,000-file run L5 lost its PhotoVault mount right after mounting it (PERFORMANCE.md)
    photovault) "$PV" mount "$M" --store "$C" --user bench --passfile "$PASSFILE" --no-dbus ;;
    # the same build with its request threads under SCHED_BATCH (change 33, the default
    # until run L3) or under the default policy, whatever the build's default is: an A/B
    # of the policy in one run (scale mode only)
    photovault_batch) PHOTOVAULT_BATCH_WORKERS=1 "$PV" mount "$M" --store "$C" --user bench --passfile "$PASSFILE" --no-dbus ;;
    photovault_other) PHOTOVAULT_BATCH_WORKERS=0 "$PV" mount "$M" --store "$C" --user bench --passfile "$PASSFILE" --no-dbus ;;
  esac
}

sys_umount() {
  case $SYS in
    photovault|photovault_batch|photovault_other) "$PV" unmount "$M" || fusermount3 -u "$M" ;;
    *) fusermount3 -u "$M" ;;
  esac
}

fuse_holders() {  # PIDs that hold /dev/fuse open (one find, no fork per fd)
  find /proc/[0-9]*/fd -maxdepth 1 -lname /dev/fuse 2>/dev/null | cut -d/ -f3 | sort -un
}

find_daemon_pids() {  # find_daemon_pids "HOLDERS-BEFORE-MOUNT": sets DPIDS
  local p arg found="" holders
  holders=$(fuse_holders)
  for p in $holders; do
    while IFS= read -r -d '' arg; do
      case $arg in
        "$M"|"$M/"|*"=$M"|"source=$C") found="$found $p"; break ;;
      esac
    done < "/proc/$p/cmdline" 2>/dev/null
  done
  if [ -z "$found" ]; then
    # the daemon does not name the mountpoint in its argv: take the /dev/fuse holders
    # that appeared during this mount (mounts are done one at a time here)
    for p in $holders; do
      case " $1 " in *" $p "*) ;; *) found="$found $p" ;; esac
    done
    [ -z "$found" ] || log "note: $SYS daemon found by /dev/fuse diff:$found"
  fi
  DPIDS=${found# }
}

# STAT = the fields of /proc/PID/stat after "(comm) ": STAT[11] utime, STAT[12] stime,
# STAT[13] cutime, STAT[14] cstime (ticks). Builtins only, so reading it forks nothing.
STAT=()
read_stat() {  # read_stat PID; returns 1 if the process is gone
  local line
  read -r line 2>/dev/null < "/proc/$1/stat" || return 1
  line=${line##*) }; read -r -a STAT <<< "$line"
}

daemon_ticks() {  # utime+stime (all threads) of the daemon(s)
  local t=0 p
  for p in $DPIDS; do read_stat "$p" && t=$(( t + STAT[11] + STAT[12] )); done
  echo "$t"
}

sample_hwm() {  # keep the largest VmHWM (KiB) seen for the current system's daemon
  local p kb
  for p in $DPIDS; do
    kb=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null)
    [ -n "$kb" ] && [ "$kb" -gt "${S_HWM[$SYS]:-0}" ] && S_HWM[$SYS]=$kb
  done
  return 0
}

do_mount() {
  is_fuse "$SYS" || return 0
  local before t0 i=0
  before=$(fuse_holders | tr '\n' ' ')
  t0=$EPOCHREALTIME
  if ! sys_mount >> "$LOGS/$SYS.log" 2>&1; then
    log "$SYS: mount command failed (see $LOGS/$SYS.log)"; return 1
  fi
  while ! mountpoint -q "$M"; do
    sleep 0.05; i=$((i + 1))
    [ $i -gt $((MOUNT_TIMEOUT * 20)) ] && { log "$SYS: $M not mounted after ${MOUNT_TIMEOUT}s"; return 1; }
  done
  rec mount_s "$(fsub "$t0" "$EPOCHREALTIME")" s
  find_daemon_pids "$before"
  [ -n "$DPIDS" ] || log "note: no daemon PID found for $SYS; no CPU/RSS figures"
  return 0
}

do_umount() {  # unmount and wait until the daemon has exited (it may still be flushing)
  is_fuse "$SYS" || return 0
  mountpoint -q "$M" || return 0
  local i=0 p alive
  sample_hwm
  sys_umount >> "$LOGS/$SYS.log" 2>&1 || { log "$SYS: unmount failed, detaching lazily"; umount -l "$M"; }
  while :; do
    alive=0; for p in $DPIDS; do [ -d "/proc/$p" ] && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.05; i=$((i + 1))
    [ $i -gt $((UMOUNT_TIMEOUT * 20)) ] && { log "$SYS: daemon still alive ${UMOUNT_TIMEOUT}s after unmount"; break; }
  done
  DPIDS=""
}

cold() {  # make the next phase cold: remount + drop page/dentry/inode caches
  do_umount; drop_caches; do_mount || return 1
  V=$(view_of)
}

view_of() { if is_fuse "$SYS"; then echo "$M"; else echo "$C"; fi; }

declare -A S_DPIDS S_OK S_HWM S_WALL
select_sys() {  # select_sys SYS ROUND
  SYS=$1; ROUND=$2
  C=$BACKROOT/$SYS/r$ROUND/store
  M=$MNTROOT/$SYS-r$ROUND
  V=$(view_of); DPIDS=${S_DPIDS[$SYS]:-}
}
save_sys() { S_DPIDS[$SYS]=$DPIDS; }

start_sys() {
  select_sys "$1" "$2"
  rm -rf "${C%/store}"; mkdir -p "$C"
  is_fuse "$SYS" && mkdir -p "$M"
  local t0=$EPOCHREALTIME
  S_HWM[$SYS]=0
  if ! sys_init >> "$LOGS/$SYS.log" 2>&1; then
    log "$SYS: init FAILED (see $LOGS/$SYS.log); $SYS is excluded from the rest of the run"
    tail -n 5 "$LOGS/$SYS.log" | sed 's/^/    | /' >&2
    DROPPED[$SYS]="init failed"; return 1
  fi
  is_fuse "$SYS" && rec init_s "$(fsub "$t0" "$EPOCHREALTIME")" s
  if ! do_mount; then
    log "$SYS: mount FAILED (see $LOGS/$SYS.log); $SYS is excluded from the rest of the run"
    tail -n 5 "$LOGS/$SYS.log" | sed 's/^/    | /' >&2
    DROPPED[$SYS]="mount failed"; return 1
  fi
  V=$(view_of); S_OK[$SYS]=1
  save_sys
}

stop_sys() {
  select_sys "$1" "$2"
  do_umount
  [ "${S_HWM[$SYS]:-0}" -gt 0 ] && rec peak_rss_MiB "$(awk -v k="${S_HWM[$SYS]}" 'BEGIN{printf "%.1f", k/1024}')" MiB
  save_sys
  rm -rf "${C%/store}"
}

# ----------------------------------------------------------------------------- recording
rec() {  # rec METRIC VALUE UNIT
  printf '%s\t%s\t%s\t%s\t%s\n' "$ROUND" "$SYS" "$1" "$2" "$3" >> "$RAW"
  printf '      %-26s %10s %s\n' "$1" "$2" "$3" >&2
}

# Untimed, before every timed step of every system: write and delete MB of memory (two
# writers, one per core) on a tmpfs of its own. This VM hands memory that stays free for
# a moment back to its host, and the first touch of such a page costs a host fault (see
# "Noise" in docs/PERFORMANCE.md). Without this step the system that ran right after a
# step that freed memory got those warm pages and the next one got cold ones: the same
# photo import took 30-40 % longer in second place than in first, for gocryptfs and
# PhotoVault alike, and with a fixed order that bias always fell on the same system.
warm_memory() {  # warm_memory MB
  [ "$WARM" = 1 ] && [ "${1:-0}" -gt 0 ] || return 0
  local half=$(( ($1 + 1) / 2 )) pid
  dd if=/dev/zero of="$WARMFS/a" bs=1M count="$half" status=none & pid=$!
  dd if=/dev/zero of="$WARMFS/b" bs=1M count="$half" status=none
  wait "$pid"
  rm -f "$WARMFS/a" "$WARMFS/b"
}

# CT = user+sys of this shell's waited-for children (cutime+cstime): the timed tools' own
# CPU. Called directly, not in a command substitution, which would read a subshell's times.
CT=0
client_ticks() { read_stat "$BASHPID"; CT=$(( STAT[13] + STAT[14] )); }

T0=0; K0=0; C0=0; DT=NA; DCPU=NA; CCPU=NA
# t_start [MB]: MB is what the step may allocate (new files plus the page cache it fills)
# on the system that allocates most, for warm_memory
t_start() { warm_memory "${1:-0}"; sync -f "$BACKROOT"; K0=$(daemon_ticks); client_ticks; C0=$CT; T0=$EPOCHREALTIME; }
t_stop() {  # t_stop RC
  local t1=$EPOCHREALTIME k1
  client_ticks
  k1=$(daemon_ticks)
  if [ "$1" = 0 ]; then DT=$(fsub "$T0" "$t1"); else DT=NA; log "$SYS: timed command failed (rc=$1)"; fi
  if [ -n "$DPIDS" ]; then DCPU=$(awk -v a="$K0" -v b="$k1" -v hz="$CLK_TCK" 'BEGIN{printf "%.2f", (b-a)/hz}')
  else DCPU=NA; fi
  CCPU=$(awk -v a="$C0" -v b="$CT" -v hz="$CLK_TCK" 'BEGIN{printf "%.2f", (b-a)/hz}')
  sample_hwm
}
# the daemon's CPU seconds, and the client's: the timed tools' own user+sys
rec_cpu() {
  [ "$DCPU" = NA ] || rec "$1.cpu_s" "$DCPU" s
  [ "$DT" = NA ] || rec "$1.client_cpu_s" "$CCPU" s
}

settle() {  # end of a timed write phase: data handed to the backing fs (and on disk)
  sync -f "$V" && { [ "$V" = "$C" ] || sync -f "$C"; }
}

# ----------------------------------------------------------------------------- phases
# Each runs for the selected system.  Return 1 only if the system became unusable.
# Untimed: free and compact memory. Writing or reading 1 GiB right after the previous
# system's files were deleted sometimes hit the kernel's allocation slow path (measured:
# 3-5x the CPU seconds, for every system in turn), which made these phases mostly noise.
settle_memory() { drop_caches; [ -w /proc/sys/vm/compact_memory ] && echo 1 > /proc/sys/vm/compact_memory; return 0; }

ph_seqwrite() {
  settle_memory
  t_start $(( SIZE_MB * 2 )); dd if=/dev/zero of="$V/seq.bin" bs=1M count="$SIZE_MB" conv=fsync status=none; t_stop $?
  rec seqwrite_MiBps "$(rate "$SIZE_MB" "$DT")" MiB/s; rec_cpu seqwrite
}

ph_seqread() {
  [ -f "$V/seq.bin" ] || { log "seqread: no seq.bin (needs seqwrite)"; return 0; }
  cold || return 1
  settle_memory
  t_start "$SIZE_MB"; dd if="$V/seq.bin" of=/dev/null bs=1M status=none; t_stop $?
  rec seqread_MiBps "$(rate "$SIZE_MB" "$DT")" MiB/s; rec_cpu seqread
  rm -f "$V/seq.bin"
}

ph_photo_in() {
  mkdir -p "$V/photos"
  t_start $(( PHOTO_MB * 2 )); cp "$INPUTS/photos"/IMG_* "$V/photos/" && settle; t_stop $?
  rec photo_in_s "$DT" s; rec photo_in_MiBps "$(rate "$PHOTO_MB" "$DT")" MiB/s; rec_cpu photo_in
}

ph_photo_out() {
  [ -d "$V/photos" ] || { log "photo_out: no photos (needs photo_in)"; return 0; }
  cold || return 1
  local out=$INPUTS/export; rm -rf "$out"; mkdir -p "$out"
  t_start $(( PHOTO_MB * 2 )); cp "$V/photos"/IMG_* "$out/"; t_stop $?
  rec photo_out_s "$DT" s; rec photo_out_MiBps "$(rate "$PHOTO_MB" "$DT")" MiB/s; rec_cpu photo_out
  if (cd "$out" && openssl dgst -sha256 -r IMG_*) 2>/dev/null | cmp -s - "$INPUTS/photos.sha256"; then
    rec photo_verify_ok 1 bool
  else rec photo_verify_ok 0 bool; log "$SYS: PHOTO CHECKSUM MISMATCH"; fi
  rm -rf "$out" "$V/photos"
}

ph_untar() {
  mkdir -p "$V/tree"
  t_start $(( TREE_MB * 2 )); tar --no-same-owner -xf "$INPUTS/tree.tar" -C "$V/tree" 2>> "$LOGS/$SYS.log" && settle; t_stop $?
  rec untar_s "$DT" s; rec_cpu untar
}

ph_lsR() {
  [ -d "$V/tree" ] || { log "lsR: no tree (needs untar)"; return 0; }
  cold || return 1
  local o=$INPUTS/lsR.out n
  t_start; ls -lR "$V/tree" > "$o"; t_stop $?
  rec lsR_s "$DT" s; rec_cpu lsR
  n=$(grep -c '^[-dl]' "$o"); rm -f "$o"
  if [ "$n" = "$TREE_ENTRIES" ]; then rec tree_verify_ok 1 bool
  else rec tree_verify_ok 0 bool; log "$SYS: ls -lR saw $n entries, expected $TREE_ENTRIES"; fi
}

ph_rm() {
  [ -d "$V/tree" ] || { log "rm: no tree (needs untar)"; return 0; }
  t_start; rm -rf "$V/tree" && settle; t_stop $?
  rec rm_s "$DT" s; rec_cpu rm
}

ph_thumbs() {
  # setup (timed separately, it is a many-small-files write): copy the files in
  mkdir -p "$V/thumbs"
  t_start $(( THUMB_MB * 2 )); cp "$INPUTS/thumbs"/P* "$V/thumbs/" && settle; t_stop $?
  rec thumbs_write_s "$DT" s; rec_cpu thumbs_write
  cold || return 1
  # a thumbnailer: list the directory, then read the first THUMB_READ_KB of every file
  # (head -c per file; xargs batches the names so process start-up does not dominate)
  local got want=$(( THUMBS * (THUMB_READ_KB < THUMB_KB ? THUMB_READ_KB : THUMB_KB) * 1024 ))
  t_start "$THUMB_MB"
  got=$(cd "$V/thumbs" && printf '%s\0' P* | xargs -0 head -q -c $((THUMB_READ_KB * 1024)) | wc -c); t_stop $?
  rec thumbs_s "$DT" s; rec thumbs_files_per_s "$(rate "$THUMBS" "$DT")" files/s; rec_cpu thumbs
  [ "$got" = "$want" ] || log "$SYS: thumbnail read returned $got bytes, expected $want"
  rm -rf "$V/thumbs"
}

fio_iops() {  # fio_iops JSON-FILE read|write WALL-SECONDS: 4 KiB ops / wall time (incl. fsync)
  "$PY" - "$@" <<'PYEOF'
import json, sys
path, rw, wall = sys.argv[1], sys.argv[2], float(sys.argv[3]) if sys.argv[3] != "NA" else 0.0
try:
    text = open(path).read()
    job = json.loads(text[text.index("{"):])["jobs"][0]
    print(f"{job[rw]['io_bytes'] / 4096 / wall:.0f}" if wall > 0 else "NA")
except Exception:
    print("NA")
PYEOF
}

ph_fio() {
  local f=$V/fio.dat j=$LOGS/fio-$SYS-r$ROUND
  local -a common=(--filename="$f" --size="${FIO_SIZE_MB}M" --bs=4k --ioengine=psync
                   --runtime="$FIO_RUNTIME" --output-format=json)
  # lay the file out first (untimed), then one pass of buffered random 4 KiB overwrites
  # (or FIO_RUNTIME) ended by an fsync; IOPS = ops / wall time including that fsync
  fio --name=layout --filename="$f" --size="${FIO_SIZE_MB}M" --rw=write --bs=1M --end_fsync=1 \
      --output=/dev/null > /dev/null 2>> "$LOGS/$SYS.log" || { log "$SYS: fio layout failed"; return 0; }
  t_start "$FIO_SIZE_MB"; fio --name=randwrite "${common[@]}" --rw=randwrite --end_fsync=1 > "$j-write.json" 2>> "$LOGS/$SYS.log"; t_stop $?
  rec rand4k_write_iops "$(fio_iops "$j-write.json" write "$DT")" IOPS; rec_cpu rand4k_write
  # random reads, cold; fio sets POSIX_FADV_RANDOM, so each read is one 4 KiB FUSE READ
  cold || return 1
  t_start "$FIO_SIZE_MB"; fio --name=randread "${common[@]}" --rw=randread > "$j-read.json" 2>> "$LOGS/$SYS.log"; t_stop $?
  rec rand4k_read_iops "$(fio_iops "$j-read.json" read "$DT")" IOPS; rec_cpu rand4k_read
  rm -f "$f"
}

# ----------------------------------------------------------------------------- one backing
run_round() {  # run_round ROUND SYSTEM... (already rotated)
  local r=$1 s ph t0; shift
  log "=== $BACKING_NOW round $r/$PASS_ROUNDS: $*"
  for s in "$@"; do
    S_OK[$s]=0; S_WALL[$s]=0; S_HWM[$s]=0
    [ -n "${DROPPED[$s]:-}" ] && continue
    start_sys "$s" "$r"
  done
  for ph in $PASS_PHASES; do
    for s in "$@"; do
      [ "${S_OK[$s]:-0}" = 1 ] || continue
      select_sys "$s" "$r"
      log "  $ph on $SYS"
      t0=$EPOCHREALTIME
      if ! "ph_$ph"; then
        log "$SYS: $ph left it unmounted; skipping it for the rest of round $r"; S_OK[$s]=0
      fi
      S_WALL[$s]=$(awk -v a="${S_WALL[$s]}" -v b="$(fsub "$t0" "$EPOCHREALTIME")" 'BEGIN{print a + b}')
      save_sys
    done
  done
  for s in "$@"; do
    select_sys "$s" "$r"
    [ "${S_OK[$s]:-0}" = 1 ] && rec round_wall_s "${S_WALL[$s]}" s
    stop_sys "$s" "$r"
  done
}

write_env() {  # write_env FILE
  {
    echo "date: $(date -Is)"
    echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB RAM", $2/1048576}' /proc/meminfo)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "backing: $BACKING_NOW ($( [ "$BACKING_NOW" = tmpfs ] && echo "tmpfs on $RAMFS" || df -T "$DISKFS" | awk 'NR==2 {print $2 " on " $1}'))"
    echo "inputs: tmpfs on $INPUTS"
    echo "rounds: $PASS_ROUNDS; systems: ${PASS_SYSTEMS[*]}; phases: $PASS_PHASES; order alternates by round; memory warmed before each timed step: $( [ "$WARM" = 1 ] && echo yes || echo 'no (WARM=0)')"
    echo "seq file: $SIZE_MB MiB (dd bs=1M conv=fsync; read cold after remount + drop_caches)"
    echo "photos: $PHOTOS files, $PHOTO_MIN_KB-$PHOTO_MAX_KB KiB random data, $PHOTO_MB MiB in all"
    echo "thumbnails: $THUMBS files of $THUMB_KB KiB (smaller than real photos to keep setup short); first $THUMB_READ_KB KiB read of each, cold"
    echo "tree: tar of $TREE_SRC: $TREE_FILES files, $TREE_ENTRIES entries, $TREE_MB MiB"
    echo "fio: $FIO_SIZE_MB MiB file, 4 KiB psync buffered, one pass or ${FIO_RUNTIME}s; writes end with fsync"
    echo "passthrough_ll: libfuse $(pkg-config --modversion fuse3) example, default options: -o cache=auto (timeout=1.0 s), no writeback, multithreaded"
    echo "versions: $(gocryptfs -version 2>/dev/null | head -1); $(fio --version); libfuse3 $(pkg-config --modversion fuse3)"
    [ -n "$PV" ] && echo "photovault: $PV ($(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null)$(cd "$REPO" && git diff --quiet 2>/dev/null || echo '+dirty'))"
    local s; for s in "${!DROPPED[@]}"; do echo "EXCLUDED: $s (${DROPPED[$s]})"; done
  } > "$1"
}

run_backing() {  # run_backing tmpfs|disk ROUNDS "PHASE..." SYSTEM...
  BACKING_NOW=$1 PASS_ROUNDS=$2 PASS_PHASES=$3; shift 3
  PASS_SYSTEMS=("$@")
  local dir=$OUT; [ "$BACKING" = both ] && dir=$OUT/$BACKING_NOW
  mkdir -p "$dir"
  RAW=$dir/raw.tsv
  printf 'round\tsystem\tmetric\tvalue\tunit\n' > "$RAW"
  echo "${PASS_SYSTEMS[*]}" > "$dir/systems"     # column order for the report
  LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
  if [ "$BACKING_NOW" = tmpfs ]; then
    local size; size=$(backing_size_mb); check_memory $(( size + WARM_MB ))
    mount_tmpfs "$RAMFS" "$size"; BACKROOT=$RAMFS
  else
    clear_disk; mkdir -p "$DISKFS"; BACKROOT=$DISKFS
  fi
  local r i n=${#PASS_SYSTEMS[@]} t0=$EPOCHREALTIME
  local -a rot
  for ((r = 1; r <= PASS_ROUNDS; r++)); do
    # rotated by 0, 0, 2, 2, 4, 4, ... and reversed in even rounds: systems next to each
    # other in SYSTEMS swap places from round to round (a rotation alone keeps each system
    # right behind the same neighbour in every round)
    rot=(); for ((i = 0; i < n; i++)); do rot+=("${PASS_SYSTEMS[$(( (i + (r - 1) / 2 * 2) % n ))]}"); done
    if (( r % 2 == 0 )); then
      local -a rev=(); for ((i = n - 1; i >= 0; i--)); do rev+=("${rot[$i]}"); done; rot=("${rev[@]}")
    fi
    run_round "$r" "${rot[@]}"
  done
  write_env "$dir/env.txt"
  echo "wall time ($BACKING_NOW): $(fsub "$t0" "$EPOCHREALTIME") s" >> "$dir/env.txt"
  if [ "$BACKING_NOW" = tmpfs ]; then umount "$RAMFS"; else clear_disk; fi
}

report() {  # report DIR [METRIC-PREFIX]
  SUBJECT=$SUBJECT REF=$REF BASE=$BASE "$PY" "$SCRIPT_DIR/bench/report.py" "$@"
}

main() {
  if [ "${1:-}" = --scale ] || [ "${SCALE:-0}" = 1 ]; then
    [ "${1:-}" = --scale ] && shift
    exec bash "$SCRIPT_DIR/bench/scale.sh" "$@"
  fi
  case "${1:-}" in
    -h|--help) sed -n '2,/^set -uo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --report)
      [ -d "${2:-}" ] || die "usage: $0 --report RESULTS_DIR"
      if [ -f "$2/raw.tsv" ]; then report "$2"
      else local b; for b in tmpfs disk; do [ -f "$2/$b/raw.tsv" ] && report "$2/$b" "$b/"; done; fi
      exit 0 ;;
    "") ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  [ "$(id -u)" = 0 ] || die "must run as root (mounts, drop_caches)"
  case $BACKING in tmpfs|disk|both) ;; *) die "BACKING must be tmpfs, disk or both" ;; esac
  local ph; for ph in $PHASES $DISK_PHASES; do declare -F "ph_$ph" > /dev/null || die "unknown phase $ph"; done
  local n; for n in "$ROUNDS" "$DISK_ROUNDS"; do [[ $n =~ ^[0-9]+$ ]] || die "ROUNDS and DISK_ROUNDS must be whole numbers"; done
  LOGS=$OUT/logs; mkdir -p "$LOGS" "$MNTROOT" || die "cannot create $OUT"

  cleanup
  trap cleanup EXIT
  trap 'log "interrupted; unmounting"; exit 130' INT TERM

  ensure_packages
  build_passthrough_ll || log "passthrough_ll: build failed (see $BIN/passthrough_ll.build.log)"

  declare -gA DROPPED=()
  declare -ga RUN_SYSTEMS=()
  local s
  for s in $SYSTEMS; do
    case $s in
      plain|gocryptfs) RUN_SYSTEMS+=("$s") ;;
      passthrough_ll) if [ -x "$BIN/passthrough_ll" ]; then RUN_SYSTEMS+=("$s"); else DROPPED[$s]="build failed"; fi ;;
      photovault) if build_photovault; then RUN_SYSTEMS+=("$s"); else DROPPED[$s]="not built"; fi ;;
      *) die "unknown system $s (known: plain passthrough_ll gocryptfs photovault)" ;;
    esac
  done
  [ ${#RUN_SYSTEMS[@]} -gt 0 ] || die "no system left to measure"

  local t0=$EPOCHREALTIME
  prepare_inputs
  log "inputs ready in $(fsub "$t0" "$EPOCHREALTIME") s; systems: ${RUN_SYSTEMS[*]}; results in $OUT"
  local backings=tmpfs
  if [ "$BACKING" = both ]; then
    run_backing tmpfs "$ROUNDS" "$PHASES" "${RUN_SYSTEMS[@]}"
    local -a disk_systems; local disk_phases
    read -ra disk_systems <<< "$(only_listed "$DISK_SYSTEMS" "${RUN_SYSTEMS[@]}")"
    disk_phases=$(only_listed "$DISK_PHASES" $PHASES)
    if [ ${#disk_systems[@]} -gt 0 ] && [ -n "$disk_phases" ] && [ "$DISK_ROUNDS" -gt 0 ]; then
      run_backing disk "$DISK_ROUNDS" "$disk_phases" "${disk_systems[@]}"
      backings="tmpfs disk"
    else
      log "disk pass skipped: DISK_SYSTEMS ($DISK_SYSTEMS) or DISK_PHASES ($DISK_PHASES) share nothing with this run, or DISK_ROUNDS=0"
    fi
  else
    run_backing "$BACKING" "$ROUNDS" "$PHASES" "${RUN_SYSTEMS[@]}"
  fi
  log "total wall time: $(fsub "$t0" "$EPOCHREALTIME") s"

  for s in "${!DROPPED[@]}"; do log "NOTE: $s was excluded: ${DROPPED[$s]}"; done
  if [ "$BACKING" = both ]; then
    local b; for b in $backings; do report "$OUT/$b" "$b/"; echo; done | tee "$OUT/report.md"
  else
    report "$OUT" | tee "$OUT/report.md"
  fi
  log "raw: $OUT/*raw.tsv  report: $OUT/report.md  logs: $LOGS"
}

# scripts/bench/scale.sh sources this file for its functions
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
