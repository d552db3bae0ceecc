#!/bin/bash
# Run HERE (a machine with PyPI access), before a GPU check on the lent device, which reaches no registry.
# Fills .whl/ (in .gitignore) with the Python 3.12 x86-64 wheels our code needs beyond the device image's packages
# (torch, accelerate, peft, safetensors, sentencepiece, numpy, pillow, pytest ... are there; see
# /work/.library/device/KINDS.md): transformers at the version we test, shortuuid, entmax, DeepSpeed 0.19.7
# (0.19.8 cannot broadcast Braco's 0-dimensional parameters) with its missing dependencies, and setuptools, the build
# backend that pyproject.toml names: check.sh installs the project with --no-build-isolation (no download), so the
# backend must be importable there, whatever version the image has (PEP 660 editable installs need >= 64).
#   bash scripts/gpu/fetch_wheels.sh                     # the default set (~17 MB)
#   bash scripts/gpu/fetch_wheels.sh --with-bitsandbytes # bitsandbytes alone (~43 MB): for a second call
# The device call then names ".whl" in carry (the whole carried tree must stay under 64 MiB).
set -euo pipefail

cd "$(dirname "$0")/../.."
OUT=.whl
rm -rf "$OUT" && mkdir -p "$OUT"
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform any)
download() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${PLATFORMS[@]}" -d "$OUT" "$@"
}

if [ "${1:-}" = "--with-bitsandbytes" ]; then
    download "bitsandbytes>=0.45"
else
    download "transformers==5.24.0" "shortuuid>=1.0" "entmax>=1.3" hjson pydantic pydantic-core annotated-types \
        typing-inspection "typing-extensions>=4.16" "setuptools>=70.1"
    # DeepSpeed ships only a source archive: build its (pure Python, ops compiled at run time) wheel here.
    DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps --no-build-isolation -w "$OUT" "deepspeed==0.19.7"
fi

SIZE=$(du -sb "$OUT" | cut -f1)
ls -1 "$OUT"
echo "$OUT holds $((SIZE / 1024 / 1024)) MiB"
if [ "$SIZE" -gt $((60 * 1024 * 1024)) ]; then
    echo "$OUT is over 60 MiB, too much to carry with the repository; fetch fewer wheels per call" >&2
    exit 1
fi
