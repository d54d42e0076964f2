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
# The C module maps of CSodium, COpenSSL and CIPSecMB are found through -I; the rest are the real sources.
"$swiftc" -O -wmo -module-name CryptoBench \
    -I "${root}/Sources/CSodium" -I "${root}/Sources/COpenSSL" -I "${root}/Sources/CIPSecMB" \
    "${root}/scripts/crypto-bench/main.swift" \
    "${src}/ContentCipher.swift" "${src}/AESGCMEngine.swift" "${src}/IPSecMBGCM.swift" "${src}/SecureSlots.swift" \
    "${src}/SecureBytes.swift" "${src}/Sodium.swift" "${src}/CryptoError.swift" \
    -lsodium -lcrypto -lIPSec_MB -o "${out}/crypto-bench"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs"
echo "Load average at start: $(cut -d" " -f1-3 /proc/loadavg) (numbers are only comparable on an idle machine)"
echo "AES-NI: $(grep -qw aes /proc/cpuinfo && echo yes || echo no), PCLMULQDQ: $(grep -qw pclmulqdq /proc/cpuinfo && echo yes || echo no)"
echo "AVX-512 with VAES and VPCLMULQDQ: $(for f in avx512f vaes vpclmulqdq; do grep -qw $f /proc/cpuinfo || { echo no; exit; }; done; echo yes)"
# AES-256-GCM runs through ipsec-mb where the CPU has AVX-512 VAES, else libcrypto
# (AESGCMEngine.swift); each table forces one engine (one the CPU cannot run falls back as in
# the vault, and the table says which ran). XChaCha20-Poly1305 is libsodium in all.
for engine in ipsec-mb libcrypto libsodium; do
  echo
  echo "AES-256-GCM engine: $engine"
  PHOTOVAULT_AES_ENGINE=$engine "${out}/crypto-bench"
done
