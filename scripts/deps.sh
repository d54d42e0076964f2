#!/usr/bin/env bash
# Installs the Debian packages PhotoVault needs. Sourced by install.sh, test.sh and bench.sh.
# Usage: scripts/deps.sh [runtime|test|bench]
set -euo pipefail
trap 'echo "deps.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
RUNTIME=(libfuse3-dev fuse3 libsodium-dev libssl-dev libipsec-mb-dev libsystemd-dev pkg-config)
# mount (mount, umount: tmpfs and bind mounts) and passwd (useradd: the other-user tests) are
# Priority: required, on every Debian system; listed so what the tests run is all named here.
# btrfs-progs and xfsprogs: mkfs for the full copy-on-write store tests (MountFullCopyOnWriteTests).
TEST=(dbus libglib2.0-bin python3-dbus rsync attr tar util-linux mount passwd xxd python3-gi gir1.2-gnomedesktop-3.0 libgdk-pixbuf2.0-bin shared-mime-info groff-base sqlite3 procps strace btrfs-progs xfsprogs exfat-fuse exfatprogs)
BENCH=(gocryptfs fio gcc)
want=("${RUNTIME[@]}")
case "${1:-runtime}" in
  test) want+=("${TEST[@]}") ;;
  bench) want+=("${TEST[@]}" "${BENCH[@]}") ;;
esac
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
