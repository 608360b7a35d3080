# loadmaster: `make demo` runs the main job on the built-in cluster and workload;
# `make test` runs the linters, the type checker, the layer contracts and the tests.
# Both create or reuse the virtualenv in $(VENV) and install what they need.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out/demo

.PHONY: demo test fuzz lint bench docs-slow clean e2e-kind e2e-kind-clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Every install is pinned by constraints.txt. The demo writes a report: the `report` extra. The
# `fast` extra (numba) compiles the reservation search's count; $(COMPILE) compiles it now, into
# numba's cache (about 6 s once), so that no run pays for it (docs/simulator.md, the eleventh round).
COMPILE = $(BIN)/python -c 'from loadmaster.scheduling import scan_kernel; scan_kernel.KERNELS.load()'
$(VENV)/.core: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[report,fast]'
	$(COMPILE)
	touch $@

# torch first, pinned: its CPU build; left to resolve `torch>=2.4` alone, pip would fetch a CUDA build.
$(VENV)/.dev: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev,rl,ray]'
	$(COMPILE)
	touch $(VENV)/.core $@

demo: $(VENV)/.core
	$(BIN)/loadmaster simulate --cluster lab --workload lab --out $(OUT)
	@echo "Open $(OUT)/report.html in a browser; PNG plots and job tables are beside it."

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# The sources are byte-compiled first, as pip compiles an installed package: where the environment
# sets PYTHONDONTWRITEBYTECODE, every process the tests start would otherwise compile loadmaster
# from source again, a tenth of a second of CPU that no installed copy pays (test_cli_startup
# times `loadmaster --help` against issue 20's 0.3 s).
test: lint
	$(BIN)/python -m compileall -q src
	$(BIN)/pytest -q

# Property tests on new random examples, ten times as many as `make test` checks (tests/fuzzing.py);
# keep each failure it finds as an @example of its test. Not run in CI: it is not deterministic.
fuzz: $(VENV)/.dev
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q tests/properties tests/unit/test_release_plan.py

bench: $(VENV)/.core
	$(BIN)/python benchmarks/sim_throughput.py

# The README's and docs' commands marked `sh runnable slow` (minutes each), in a fresh clone of HEAD,
# a line per command as it starts and ends; the cheap `sh runnable` ones run in `make test`.
docs-slow: $(VENV)/.dev
	$(BIN)/python tools/doc_commands.py --only-slow --timeout 1800

# End to end on a local kind cluster: needs Docker and kind (https://kind.sigs.k8s.io); not run in CI.
# Builds the image, loads it into kind, installs the PodGroup CRD, deploy/ and the gang example,
# then waits until every example pod is scheduled. `make e2e-kind-clean` deletes the cluster.
KIND ?= kind
KUBECTL ?= kubectl
KIND_CLUSTER ?= loadmaster-e2e
PODGROUP_CRD ?= https://raw.githubusercontent.com/kubernetes-sigs/scheduler-plugins/master/manifests/coscheduling/crd.yaml

e2e-kind:
	$(KIND) get clusters | grep -qx $(KIND_CLUSTER) || $(KIND) create cluster --name $(KIND_CLUSTER) --wait 120s
	docker build -f deploy/Dockerfile -t loadmaster:dev .
	$(KIND) load docker-image loadmaster:dev --name $(KIND_CLUSTER)
	# kind nodes have no GPUs: advertise 8 fake nvidia.com/gpu on each node (extended resources need no device plugin to be scheduled)
	for node in $$($(KUBECTL) get nodes -o name); do \
	  $(KUBECTL) patch $$node --subresource=status --type=json \
	    -p '[{"op":"add","path":"/status/capacity/nvidia.com~1gpu","value":"8"}]'; done
	$(KUBECTL) apply -f $(PODGROUP_CRD)
	$(KUBECTL) apply -f deploy/namespace.yaml
	$(KUBECTL) apply -f deploy/rbac.yaml -f deploy/configmap-profiles.yaml -f deploy/configmap-queues.yaml -f deploy/deployment.yaml
	$(KUBECTL) apply -f deploy/pdb.yaml -f deploy/service.yaml
	$(KUBECTL) -n loadmaster rollout status deployment/loadmaster --timeout=180s
	$(KUBECTL) apply -f deploy/examples/gang.yaml
	$(KUBECTL) wait --for=condition=PodScheduled pod -l scheduling.x-k8s.io/pod-group=gang-demo --timeout=120s
	$(KUBECTL) get pods -o wide -l scheduling.x-k8s.io/pod-group=gang-demo

e2e-kind-clean:
	$(KIND) delete cluster --name $(KIND_CLUSTER)

clean:
	rm -rf $(VENV) out .mypy_cache .ruff_cache .pytest_cache
