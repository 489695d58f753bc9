#!/usr/bin/env bash
# One script for a GPU machine (CuPy, Numba, PyTorch, pytest-xdist preinstalled; no
# network), 7.5 to 11 minutes (each part cut off by its own timeout; on an H200 on
# 2026-12-04 a run without the --cpu searches and tidgap bench took 6.8 minutes, before the
# lane kernel's benchmarks were added):
# installs tidgap from this checkout without dependencies (pydantic comes from wheels in
# .whl/, see bench/fetch_device_wheels.sh), runs the backend tests (the GPU ones among
# them), the GPU benchmarks (flush and both ordered-plan kernels, thread and lanes, at several
# population sizes, a flush and a joint generation with each and an annealing step at 2^16), `tidgap bench` on the GPU,
# a --gpu and a --cpu search of equal time on every built-in example, the fidelity
# benchmark with both stage processes on the GPU (bench/fidelity.py --device cuda), one
# `tidgap run` with gradients checked, baselines and the memory report, and the same plan
# under torchrun; then prints a summary. Logs and JSON go to $OUT (or /tmp).
# Usage: bash bench/gpu_check.sh; a shorter rerun: SEARCH_DEVICES=gpu SKIP_TIDGAP_BENCH=1 bash ...
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
exec > >(tee "$out/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . \
  || python3 -m pip install -q --no-index --no-deps --no-build-isolation . || exit 2
tidgap=(python3 -m tidgap)

echo "== machine ($(date -u +%FT%TZ))"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
nproc
python3 -c "import cupy, numba, numpy, torch, sys; print('python', sys.version.split()[0], 'cupy', cupy.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)"
python3 -c "from tidgap.backends.gpu import gpu_unusable_reason as r; print('gpu usable:', r() or 'yes')"

echo "== tests (tests/backends: the GPU tests, the kernels' host builds, every backend)"
timeout 90 python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs -p no:benchmark \
  tests/backends/test_gpu.py tests/backends/test_joint_kernels.py \
  tests/backends/test_contract.py tests/backends/test_windowed.py \
  tests/backends/test_registry.py tests/backends/test_windowed_lanes.py
tests_status=$?

echo "== benchmarks (bench/bench_gpu.py)"
timeout 130 python3 -m pytest -q -p no:cacheprovider bench/bench_gpu.py --benchmark-only \
  --benchmark-max-time=0.3 --benchmark-columns=median,iqr,rounds \
  --benchmark-json="$out/bench_gpu.json"
bench_status=$?
[ "${SKIP_TIDGAP_BENCH:-}" ] || timeout 50 "${tidgap[@]}" bench --backend cuda,numba \
  --schedule all --population 65536,1048576 --repeats 5 --out "$out/tidgap_bench.json"

echo "== searches (seed 0, 8 s each, on ${SEARCH_DEVICES:=gpu cpu})"
searches_end=$((SECONDS + 90))
for example in $(python3 -c "from tidgap.model.examples import example_names; print(*example_names())"); do
  for device in $SEARCH_DEVICES; do
    left=$((searches_end - SECONDS))
    if [ "$left" -lt 12 ]; then echo "(out of time: $example --$device not run)"; continue; fi
    echo "-- $example --$device"
    timeout $((left < 25 ? left : 25)) "${tidgap[@]}" search "example:$example" --seed 0 \
      --"$device" --time-limit 8 --quiet
  done
done

echo "== fidelity: 2 stage processes sharing the GPU (bench/fidelity.py --device cuda)"
fidelity=/tmp/fidelity
timeout 180 python3 bench/fidelity.py --device cuda --out-dir "$fidelity" --repeats 2 \
  --rounds 2 --search-seconds 5 --iterations 5
fidelity_status=$?
cp "$fidelity/fidelity.json" "$out/fidelity_cuda.json" 2>/dev/null
python3 -c "import json, sys; print('profiled memory:', json.load(open(sys.argv[1]))['source'].get('memory'))" \
  "$fidelity/gpt2.json"

echo "== tidgap run on the GPU: gradients, baselines, memory; then under torchrun"
gpt=(--model gpt $(cd bench && python3 -c "from fidelity import GPU_MODEL_OPTIONS as o; print(*o)")
  --device cuda)  # the model bench/fidelity.py profiled
plan=$fidelity/searched.json
timeout 50 "${tidgap[@]}" run "$fidelity/gpt2-calibrated.json" "$plan" "${gpt[@]}" \
  --iterations 5 --warmup 2 --check-gradients --baselines --trace "$out/run_trace.json" \
  && timeout 40 python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m tidgap run \
    "$fidelity/gpt2-calibrated.json" "$plan" "${gpt[@]}" --iterations 3 --check-gradients
run_status=$?

echo "== summary: tests exit $tests_status, benchmarks exit $bench_status, fidelity exit" \
  "$fidelity_status, GPU runs exit $run_status ($(date -u +%FT%TZ); log: $out/gpu_check.log)"
