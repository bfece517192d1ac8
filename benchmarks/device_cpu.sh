#!/usr/bin/env bash
# CPU benchmarks on the device host (an isolated Xeon), pinned to 2 cores like the CI machine.
# Usage on the host: bash benchmarks/device_cpu.sh  (expects wheels for egglog/ml_dtypes in .gpu_wheels)
set -u
python3 --version
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu_wheels/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:/tmp/site:${PYTHONPATH:-}
export LIGHTSPEED_CACHE=0 OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 MKL_NUM_THREADS=2
lscpu | grep -E "Model name|^CPU\(s\)" | head -2
python3 -c "import numpy, torch; print('numpy', numpy.__version__, 'torch', torch.__version__)"
taskset -c 0,1 python3 benchmarks/cpu_decode.py --torch-threads 2 2>&1 | grep -v "^\[search\]"
taskset -c 0,1 python3 benchmarks/cpu_block.py 2>&1 | grep -v "^\[search\]" | head -8
