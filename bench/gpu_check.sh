#!/usr/bin/env bash
# One script for a GPU machine (CuPy, Numba, PyTorch, pytest-xdist preinstalled; no
# network), at most ${BUDGET:-560} s (each part cut off by its own timeout, and none started
# past the budget; the device's per-call limit is 600 s): installs tidgap from this checkout
# without dependencies (pydantic comes from wheels in .whl/, see
# bench/fetch_device_wheels.sh), runs the backend tests (the GPU ones among them), the GPU
# benchmarks (flush, and the ordered-plan kernels: thread in blocks of 128 and of a warp,
# lanes, and the one "auto" times fastest, at several population sizes, a flush and a joint
# generation with each and an annealing step at 2^16; the kernel "auto" ran is printed
# after them), the fidelity
# benchmark with both stage processes on the GPU (bench/fidelity.py --device cuda,
# one round), one `tidgap run` with gradients checked, baselines, replays and the memory report, and
# the same plan under torchrun; then prints a summary and exits non-zero if any part
# failed (3 at once, measuring nothing, where no GPU is usable). Optional: SEARCH_DEVICES="gpu cpu"
# adds an 8 s search of every built-in example on each; TIDGAP_BENCH=1 adds `tidgap bench`
# on the GPU and Numba (both measured on 2026-12-04). Logs and JSON go to $OUT (or /tmp).
# On the H200 of 2026-12-04 the fidelity step (then 180 s, 2 rounds) and the run (then 50 s)
# were cut off: a fresh machine compiles Numba's loops in the fidelity's first search and
# starts CUDA in every worker process, so they now have more time and do less.
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
deadline=$((SECONDS + ${BUDGET:-560}))
# limited LIMIT COMMAND...: COMMAND under `timeout` of LIMIT seconds or what is left of the
# budget (less 5 s), whichever is less; not run (status 124) when under 20 s are left.
limited() {
  local left=$((deadline - SECONDS - 5)) limit=$1
  shift
  if [ "$left" -lt 20 ]; then echo "(out of time: not run: $*)"; return 124; fi
  timeout $((limit < left ? limit : left)) "$@"
}

echo "== machine ($(date -u +%FT%TZ))"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader
nproc
python3 -c "import cupy, numba, numpy, torch, sys; print('python', sys.version.split()[0], 'cupy', cupy.__version__, 'numba', numba.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__)"
python3 -c "from tidgap.backends.gpu import gpu_unusable_reason as r; print('gpu usable:', r() or 'yes')"
if ! python3 -c "import sys; from tidgap.backends.gpu import gpu_unusable_reason as r; sys.exit(bool(r()))"; then
  echo "== summary: FAILED: no usable GPU, nothing measured"; exit 3
fi

echo "== tests (tests/backends: the GPU tests, the kernels' host builds, every backend;"
echo "   the run memory kernel against the array passes)"
limited 70 python3 -m pytest -q -p no:cacheprovider -n 8 -rfEs -p no:benchmark \
  tests/backends/test_gpu.py tests/backends/test_joint_kernels.py \
  tests/backends/test_contract.py tests/backends/test_windowed.py \
  tests/backends/test_registry.py tests/backends/test_windowed_lanes.py \
  tests/backends/test_run_pricing.py \
  "tests/optimize/test_run_memory.py::test_the_compiled_twin_counts_as_the_array_passes"
tests_status=$?

echo "== benchmarks (bench/bench_gpu.py)"
limited 120 python3 -m pytest -q -p no:cacheprovider bench/bench_gpu.py --benchmark-only \
  --benchmark-max-time=0.3 --benchmark-columns=median,iqr,rounds \
  --benchmark-json="$out/bench_gpu.json"
bench_status=$?
# every benchmark skipped (pytest exits 0) is a failure here
python3 -c "import json, sys; sys.exit(not json.load(open(sys.argv[1]))['benchmarks'])" \
  "$out/bench_gpu.json" 2>/dev/null || { echo "(no GPU benchmark ran)"; [ "$bench_status" != 0 ] || bench_status=1; }
[ -f "$out/bench_gpu.json" ] && python3 -c "import json, sys; [print(b['name'], 'ran', b['extra_info']['kernel']) for b in json.load(open(sys.argv[1]))['benchmarks'] if 'kernel' in b['extra_info']]" \
  "$out/bench_gpu.json"
[ -z "${TIDGAP_BENCH:-}" ] || limited 50 "${tidgap[@]}" bench --backend cuda,numba \
  --schedule all --population 65536,1048576 --repeats 5 --out "$out/tidgap_bench.json" \
  || bench_status=$?

echo "== searches (seed 0, 8 s each, on ${SEARCH_DEVICES:=none})"
searches_end=$((SECONDS + 90 < deadline - 5 ? SECONDS + 90 : deadline - 5))
searches_failed=0
for example in $(python3 -c "from tidgap.model.examples import example_names; print(*example_names())"); do
  for device in ${SEARCH_DEVICES/none/}; do
    left=$((searches_end - SECONDS))
    if [ "$left" -lt 12 ]; then echo "(out of time: $example --$device not run)"; continue; fi
    echo "-- $example --$device"
    timeout $((left < 25 ? left : 25)) "${tidgap[@]}" search "example:$example" --seed 0 \
      --"$device" --time-limit 8 --quiet || searches_failed=$((searches_failed + 1))
  done
done

echo "== fidelity: 2 stage processes sharing the GPU (bench/fidelity.py --device cuda)"
fidelity=/tmp/fidelity
rm -rf "$fidelity"  # a warm machine's earlier call left its plans there
limited 230 python3 bench/fidelity.py --device cuda --out-dir "$fidelity" \
  --repeats 1 --rounds 1 --search-seconds 3 --iterations 5
fidelity_status=$?
cp "$fidelity/fidelity.json" "$out/fidelity_cuda.json" 2>/dev/null
python3 -c "import json, sys; m = json.load(open(sys.argv[1]))['source'].get('memory') or {}; \
print('profiled memory:', {k: v for k, v in m.items() if not k.endswith('rule')})" "$fidelity/gpt2.json"

echo "== tidgap run on the GPU: gradients, baselines, memory, replays; then under torchrun"
# --transport auto: NCCL where the machine has a GPU per stage process (never lent yet),
# else gloo through host memory; the report's first line says which ran.
gpt=(--model gpt $(cd bench && python3 -c "from fidelity import GPU_MODEL_OPTIONS as o; print(*o)")
  --device cuda)  # the model bench/fidelity.py profiled
plan=$fidelity/searched.json
# each run's own --timeout ends it before the script's limit does, so that it prints the
# last line each worker printed (where the time went; on 2026-12-04 the run was cut off
# silently at 50 s): 3 plans in turn x 22 s, then 1 x 40 s
limited 80 "${tidgap[@]}" run "$fidelity/gpt2-calibrated.json" "$plan" "${gpt[@]}" \
  --iterations 5 --warmup 2 --check-gradients --baselines --replay \
  --trace "$out/run_trace.json" --timeout 22 \
  && limited 50 python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m tidgap run \
    "$fidelity/gpt2-calibrated.json" "$plan" "${gpt[@]}" --iterations 3 --check-gradients \
    --timeout 40
run_status=$?

statuses="$tests_status $bench_status $fidelity_status $run_status"
[ "$statuses $searches_failed" = "0 0 0 0 0" ] && verdict=passed || verdict=FAILED
echo "== summary: $verdict: tests exit $tests_status, benchmarks exit $bench_status," \
  "searches failed $searches_failed, fidelity exit $fidelity_status, GPU runs exit" \
  "$run_status ($(date -u +%FT%TZ); log: $out/gpu_check.log)"
[ "$verdict" = passed ]
