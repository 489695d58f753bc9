#!/usr/bin/env bash
# Download into .whl/ the wheels tidgap needs that the GPU machine's image lacks (it has
# Python 3.12, CuPy, Numba, click, pytest; not pydantic). Run here, then carry .whl.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
for package in pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 \
               typing-inspection==0.4.2; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 -d .whl "$package"
done
ls .whl
