#!/usr/bin/env bash
# Installs PhotoVault: Debian packages, a release build, `photovault` on the PATH
# (/usr/local/bin) with its bash completion, man page and systemd user unit (not enabled). Then, unless --no-mount is given,
# runs the main job: mounting the default vault at ~/PhotoVault (on first use it offers to
# create the store and your account).
set -euo pipefail
trap 'echo "install.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
bash scripts/deps.sh runtime
swift build -c release 2>&1 | tail -n 2
bin="$(swift build -c release --show-bin-path)/photovault"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO install -m 0755 "$bin" /usr/local/bin/photovault
if [ -f scripts/photovault-completion.bash ]; then
  $SUDO install -D -m 0644 scripts/photovault-completion.bash /usr/share/bash-completion/completions/photovault
fi
if [ -f docs/photovault.1 ]; then
  $SUDO install -D -m 0644 docs/photovault.1 /usr/local/share/man/man1/photovault.1
fi
# The systemd user unit, installed but not enabled (README: 'Starting at login with systemd').
$SUDO install -D -m 0644 scripts/photovault.service /usr/local/lib/systemd/user/photovault.service
echo "installed: /usr/local/bin/photovault"
echo "to mount at login: systemctl --user enable --now photovault.service (README, 'Starting at login with systemd')"
if [ "${1:-}" != "--no-mount" ]; then
  exec /usr/local/bin/photovault mount
fi
