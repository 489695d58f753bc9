#!/usr/bin/env bash
# One script for a GPU machine (CuPy, Numba, pytest preinstalled; no network), at most
# 9 minutes (100 s tests, 150 s benchmarks, 100 s searches, 4 min profile, search and runs
# on the GPU, each cut off by a timeout):
# installs tidgap from this checkout without dependencies (pydantic comes from wheels in
# .whl/, see bench/fetch_device_wheels.sh), runs the GPU tests, the GPU benchmarks (flush
# and ordered-plan kernels at several population sizes, a flush and a joint generation and
# an annealing step at 2^16), a --gpu and a --cpu search on every built-in example and a
# tiny GPT profiled and run on the GPU (its allocator peaks; tidgap run --device cuda with
# its gradients checked, then the same under torchrun), then prints a summary.
# Usage: bash bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
log=${OUT:-/tmp}/gpu_check.log
exec > >(tee "$log") 2>&1

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . \
  || python3 -m pip install -q --no-index --no-deps --no-build-isolation . || exit 2

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import cupy, numba, numpy, sys; print('python', sys.version.split()[0], 'cupy', cupy.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__)"
python3 -c "from tidgap.backends.gpu import gpu_unusable_reason as r; print('gpu usable:', r() or 'yes')"

echo "== tests (GPU, kernels, backends)"
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/backends
tests_status=$?

echo "== benchmarks"
timeout 150 python3 -m pytest -q -p no:cacheprovider bench/bench_gpu.py --benchmark-only \
  --benchmark-max-time=0.5 --benchmark-columns=median,iqr,rounds \
  --benchmark-json="${OUT:-/tmp}/bench_gpu.json"
bench_status=$?

echo "== searches (seed 0, default stopping)"
searches_end=$((SECONDS + 100))
for example in $(python3 -c "from tidgap.model.examples import example_names; print(*example_names())"); do
  for device in gpu cpu; do
    left=$((searches_end - SECONDS))
    if [ "$left" -lt 5 ]; then echo "(out of time: $example --$device not run)"; continue; fi
    timeout $((left < 40 ? left : 40)) tidgap search "example:$example" --seed 0 --"$device" --quiet
  done
done

echo "== profile and run on the GPU (2 stage processes sharing it; allocator peaks per stage)"
gpt=(--model gpt --layers 2 --hidden 64 --heads 2 --seq-len 32 --vocab 500)
problem=${OUT:-/tmp}/gpu-gpt.json
timeout 60 tidgap profile gpt "${gpt[@]:2}" --stages 2 --batch-size 8 --device cuda \
  --repeats 3 --warmup 1 --quiet --out "$problem" \
  && python3 -c "import json, sys; print('memory:', json.load(open(sys.argv[1]))['source'].get('memory'))" "$problem" \
  && timeout 30 tidgap search "$problem" --mirrored --cpu --time-limit 5 --quiet --out /tmp/gpu-plan.json \
  && timeout 90 tidgap run "$problem" /tmp/gpu-plan.json "${gpt[@]}" --device cuda --iterations 5 \
    --warmup 2 --check-gradients --baselines \
  && timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m tidgap run \
    "$problem" /tmp/gpu-plan.json "${gpt[@]}" --device cuda --iterations 3 --check-gradients
run_status=$?

echo "== summary: tests exit $tests_status, benchmarks exit $bench_status, GPU profile and run exit $run_status (log: $log)"
