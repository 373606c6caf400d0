#!/usr/bin/env bash
# The GPU check for a machine with one CUDA GPU and no network (python -m tests.benchmarks gpu).
#
#   bash tests/benchmarks/gpu_device.sh prepare   # here, with PyPI: wheels into .whl/ (~6 MB)
#   bash tests/benchmarks/gpu_device.sh run       # there: install .whl/ offline, test, measure
#
# `prepare` fetches, for CPython 3.12 on x86-64 Linux, the pure-Python packages the GPU image
# lacks (pydantic, fastapi/starlette/uvicorn, gguf, peft, trl, datasets, pytest-asyncio) and
# builds this project's own wheel; torch, transformers and the rest come with the image. `run`
# installs them into /tmp/site (PYTHONPATH), runs the `gpu` tests and the TRL comparison, and
# copies docs/gpu_runs.json and the log into $OUT when set. With a network, `nox -s gpu` does
# the same from PyPI.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEELS=(
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  fastapi==0.165.0 opentelemetry-api==1.45.1 starlette==1.10.0 uvicorn==0.54.0 gguf==0.19.0 peft==0.21.2 trl==1.16.0
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pytest-asyncio==1.5.0
)
case "${1:-run}" in
  prepare)
    rm -rf .whl && mkdir -p .whl
    if [ -d .git/info ]; then
      touch .git/info/exclude && grep -qx '/.whl/' .git/info/exclude || echo '/.whl/' >> .git/info/exclude
    fi
    plat=()
    for p in manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
      plat+=(--platform "$p")
    done
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp "${plat[@]}" -d .whl "${WHEELS[@]}"
    python3 -m pip wheel -q --no-deps -w .whl .
    du -sh .whl
    ;;
  run)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    log=/tmp/osmosis-gpu.log
    if [ -n "${OUT:-}" ]; then  # results land there run by run, also if the session is cut
      export OSMOSIS_GPU_RESULTS="$OUT/gpu_runs.json"
      log="$OUT/gpu.log"
    fi
    python3 -m tests.benchmarks gpu 2>&1 | tee "$log"
    ;;
  *)
    echo "usage: $0 prepare|run" >&2
    exit 2
    ;;
esac
