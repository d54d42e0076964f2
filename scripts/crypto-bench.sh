#!/usr/bin/env bash
# scripts/crypto-bench.sh: microbenchmark of PhotoVault's chunk AEAD (seal/open) for
# AES-256-GCM and XChaCha20-Poly1305 at chunk sizes 4 KiB ... 1 MiB; prints a Markdown table
# of median MB/s. It compiles scripts/crypto-bench/main.swift together with the real
# ChunkCipher sources (Sources/PhotoVaultCrypto) with `swiftc -O`, so it measures the code
# the vault runs, built as in a release build. Not a test: numbers depend on the machine.
#
# Usage: scripts/crypto-bench.sh            (from anywhere in the repository)
# Knobs: BENCH_MB [64] MiB of plaintext per measurement, BENCH_REPS [7] repetitions.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${root}/.build-crypto-bench"
mkdir -p "$out"
swiftc="$(command -v swiftc || echo /opt/swift/usr/bin/swiftc)"
src="${root}/Sources/PhotoVaultCrypto"
# The C module maps of CSodium and COpenSSL are found through -I; the rest are the real sources.
"$swiftc" -O -wmo -module-name CryptoBench \
    -I "${root}/Sources/CSodium" -I "${root}/Sources/COpenSSL" \
    "${root}/scripts/crypto-bench/main.swift" \
    "${src}/ContentCipher.swift" "${src}/AESGCMEngine.swift" "${src}/SecureSlots.swift" \
    "${src}/SecureBytes.swift" "${src}/Sodium.swift" "${src}/CryptoError.swift" \
    -lsodium -lcrypto -o "${out}/crypto-bench"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"
echo "Load average at start: $(cut -d" " -f1-3 /proc/loadavg) (numbers are only comparable on an idle machine)"
echo "AES-NI: $(grep -qw aes /proc/cpuinfo && echo yes || echo no), PCLMULQDQ: $(grep -qw pclmulqdq /proc/cpuinfo && echo yes || echo no)"
# AES-256-GCM runs through libcrypto where the CPU allows (AESGCMEngine.swift); the second
# table forces libsodium, for comparison. XChaCha20-Poly1305 is libsodium in both.
for engine in libcrypto libsodium; do
  echo
  echo "AES-256-GCM engine: $engine"
  PHOTOVAULT_AES_ENGINE=$engine "${out}/crypto-bench"
done
