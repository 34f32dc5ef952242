#!/usr/bin/env bash
# Release tarball whose binaries start on the login nodes people have: glibc 2.17 or newer (RHEL/Rocky 7, 8, 9,
# Ubuntu 16.04 and later), not only the build machine's. cargo-zigbuild links against glibc 2.17's symbol
# versions with zig's C toolchain; zig comes from PyPI (the `ziglang` wheel), cargo-zigbuild from crates.io.
#
#   scripts/dist.sh            -> dist/cloudai-<version>-x86_64-linux.tar.gz
#
# The tarball holds bin/cloudai, bin/runai-mock, the man page (share/man/man1/cloudai.1), shell completions
# (share/completions/cloudai.{bash,zsh,fish}), README.md and docs/. tests/dist.rs checks the highest GLIBC_
# version the binaries import.
set -euo pipefail
cd "$(dirname "$0")/.."

glibc=${CLOUDAI_DIST_GLIBC:-2.17}
target=x86_64-unknown-linux-gnu

if ! command -v zig >/dev/null && ! python3 -m ziglang version >/dev/null 2>&1; then
    echo "[dist] installing zig (PyPI: ziglang)"
    python3 -m pip install --quiet --disable-pip-version-check ziglang
fi
if ! command -v cargo-zigbuild >/dev/null; then
    echo "[dist] installing cargo-zigbuild (crates.io)"
    cargo install --locked --quiet cargo-zigbuild
fi

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
name="cloudai-${version}-x86_64-linux"
echo "[dist] building ${name} for glibc ${glibc}"
RUSTFLAGS="${RUSTFLAGS:-} --cfg cloudai_dist" cargo zigbuild --release --locked --target "${target}.${glibc}" -p cloudai -p runai-mock --bins

# cargo writes where CARGO_TARGET_DIR says (relative to the workspace), target/ by default
out="${CARGO_TARGET_DIR:-target}/${target}/release"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="${stage}/${name}"
mkdir -p "${root}/bin" "${root}/share/man/man1" "${root}/share/completions"
cp "${out}/cloudai" "${out}/runai-mock" "${root}/bin/"
"${root}/bin/cloudai" man > "${root}/share/man/man1/cloudai.1"
for sh in bash zsh fish; do
    "${root}/bin/cloudai" completions "$sh" > "${root}/share/completions/cloudai.${sh}"
done
cp README.md "${root}/"
[ -d docs ] && cp -r docs "${root}/"
mkdir -p dist
tar -C "$stage" -czf "dist/${name}.tar.gz.partial" "$name"
mv "dist/${name}.tar.gz.partial" "dist/${name}.tar.gz"
echo "[dist] dist/${name}.tar.gz ($(du -h "dist/${name}.tar.gz" | cut -f1))"
