#!/usr/bin/env bash
# FlashInfer's headers for cuda_bench's side-by-side rows (bench/flashinfer_peer.cu), fetched on a machine that reaches
# the Python package index and carried to the GPU machine in .gpudeps/ (ignored by git; scripts/gpu-check.sh builds the
# peer when .gpudeps/flashinfer exists). From a released wheel, pinned: its data/include (FlashInfer's header-only
# kernels) and data/cccl/libcudacxx/include (the libcu++ those headers need: cuda::fast_mod_div is newer than CUDA
# 13.0's), laid out as the wheel's `flashinfer/data` folder — 21 MiB, 36 MiB of .gpudeps in all.
#
#   scripts/flashinfer-headers.sh [DEST]     (default .gpudeps/flashinfer)
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.7.2.post1
dest=${1:-.gpudeps/flashinfer}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" download --quiet --no-deps -d "$tmp" "flashinfer-python==$version"
rm -rf "$dest"
mkdir -p "$dest"
python3 - "$tmp"/flashinfer_python-*.whl "$dest" "$version" <<'PY'
import pathlib, sys, zipfile
wheel, dest, version = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
keep = ("flashinfer/data/include/", "flashinfer/data/cccl/libcudacxx/include/")
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(keep) and not name.endswith("/"):
            target = dest / name[len("flashinfer/data/"):]
        elif name.endswith("/LICENSE") and ".dist-info/" in name:
            target = dest / "LICENSE"
        else:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(z.read(name))
(dest / "VERSION").write_text(f"flashinfer-python {version}\n")
PY
echo "FlashInfer $version headers in $dest ($(du -sh "$dest" | cut -f1))"
