# Two commands on a fresh Debian/Ubuntu machine:
#   make check  lint + unit tests: no root, no apt, no podman, no network (a few minutes)
#   make test   the full check (as root, or with sudo): also apt, the collection, integration,
#               bench and every molecule scenario
#   make demo   (as root, or with sudo) deploy SGLang into a local systemd container: the full
#               install, dependencies included, with the stand-in engine serving (no GPU)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
export SGLANG_DEPLOY_WHEELHOUSE ?= $(CURDIR)/.cache/wheelhouse
export ANSIBLE_FORCE_COLOR ?= 0
export PY_COLORS ?= 0
# Tests never write into the working tree: no __pycache__ from the clone's Python either.
export PYTHONDONTWRITEBYTECODE := 1
DEMO_HOST ?= sglang-demo
IMAGE ?= localhost/sglang-deploy-host:bookworm

.PHONY: setup host-packages image wheelhouse-full check check-steps lint sanity collection \
  collection-test unit unit-all unit-check crash crash-tasks integration bench bench-resolve molecule test test-steps test-serial demo \
  demo-clean ee

# The controller's tools in a venv (requirements.txt): no root.
setup: $(VENV)/.installed

# System packages (apt, as root or with sudo): podman, runc, debootstrap for molecule and the demo.
host-packages:
	@bash scripts/install-host-packages.sh

# uv (its pin from requirements.txt) installs the set: 45 s here against pip's 100 s, bytecode
# compiled (the tools' .pyc are never written later: PYTHONDONTWRITEBYTECODE); its cache is
# ~/.cache/uv, outside the clone.
$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q "$$(grep -m1 '^uv==' requirements.txt)"
	$(VENV)/bin/uv pip install --python $(PY) --compile-bytecode -q -r requirements.txt
	touch $@

# The Debian 12 systemd image of the molecule hosts and the demo (podman; rebuilt only when
# scripts/build-test-image.sh changes). Molecule does not build it: its targets depend on this.
image: host-packages
	bash scripts/build-test-image.sh

# The fast tier: lint and the unit tests side by side (each output printed whole when it ends);
# it fails if it leaves the working tree dirty.
check:
	@bash scripts/tree-unchanged.sh $(MAKE) --no-print-directory -j2 --output-sync=target check-steps

check-steps: lint unit-check crash

lint: setup
	yamllint .
	ansible-lint
	ansible-playbook --syntax-check deploy.yml playbooks/*.yml
	python scripts/filter_docs.py --check
	pycodestyle --max-line-length=160 --ignore=E402,W503,W504,E741,E203,E701,E704 plugins

# The repository is the sglang.deploy collection: built as it stands (galaxy.yml's build_ignore
# leaves out the tooling and tests) into dist/sglang-deploy-<version>.tar.gz.
collection: setup
	python scripts/filter_docs.py --check
	ansible-galaxy collection build --force --output-path dist >/dev/null

# ansible-test sanity on the built collection (Python 3.11, without network or containers;
# its tools' venvs are cached by ansible-test in ~/.ansible/test, outside the clone).
sanity: collection
	bash scripts/sanity.sh

# The execution environment for AWX / Automation Controller (execution-environment.yml,
# docs/awx.md): `ansible-builder create` writes its build context into a temporary directory,
# with no container engine; ansible-builder (pinned in scripts/ee-check.sh) in a venv cached
# outside the clone, keyed by its version.
ee: collection
	bash scripts/ee-check.sh

# Installed with ansible-galaxy into a temporary path and used from another directory.
collection-test: collection
	bash scripts/test-collection.sh dist/sglang-deploy-$$(python -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])').tar.gz

# Unit tests without the ones that download (marked `network`) or build several real venvs
# (`slow`), hypothesis with a fifth of its examples (the `check` profile), two processes.
unit-check: setup
	pytest tests/unit -n auto -m "not network and not slow" --hypothesis-profile=check

# Every crash point of the switch, the env build and rebuild, and the cleanup, cut by a kill,
# ENOSPC and EROFS, then the next run: the invariants of docs/design.md#the-switch, summarised.
crash: setup
	python tests/support/crash_points.py

# Every crash point between two tasks (tests/support/task_cuts.py): a deploy, the automatic
# rollback, a rollback by hand and an upgrade move, each cut right after every task that changed
# the host, then run again (molecule rollback, SGLANG_TASK_CUTS=all; long: two runs per
# boundary; a line per cut in SGLANG_TASK_CUTS_LOG as it goes).
crash-tasks: setup image
	SGLANG_TASK_CUTS=all SGLANG_TASK_CUTS_LOG=$${SGLANG_TASK_CUTS_LOG:-/tmp/sglang-task-cuts.log} \
	  molecule test -s rollback

# Every unit test, every example (the `full` profile), the downloads included.
unit: setup
	pytest tests/unit -n auto

# Every unit test, the downloads and venv builds included, Hypothesis with a fifth of its
# examples (`check`): make test's unit step (150 s against the full profile's 370 s beside
# molecule on two cores; `make unit` runs every example).
unit-all: setup
	pytest tests/unit -n auto --hypothesis-profile=check

# Real SGLang releases (0.5.12, 0.5.15, 0.5.23) asked what they resolve: full installs built
# once with uv by scripts/build-sglang-venv.sh, cached in ~/.cache/sglang-deploy/full-venvs.
integration: setup
	pytest tests/integration

# How exact the smoke test is: against the stand-in at a known speed; fails beyond 3%.
bench: setup
	python tests/bench/bench_smoke.py

# By hand, after `make integration` (the full envs): SGLang's resolution against its import.
bench-resolve: setup
	python tests/bench/bench_resolve.py

# By hand, on a GPU host: real SGLang of the pinned release (the python of an env that has it in
# SGLANG_PYTHON) on a tiny generated model against the stand-in, the same calls to each, compared
# (scripts/gpu_conformance.py, docs/testing.md); the report goes outside the clone. Exit 3: no GPU.
gpu-conformance: setup
	python scripts/gpu_conformance.py $(GPU_CONFORMANCE_ARGS)

# The full sglang install's wheels for molecule/real (~4 GB, ~1 min once; cached outside the
# clone in ~/.cache/sglang-deploy/wheelhouse-full/, keyed by version, Python and pinned set).
wheelhouse-full: setup
	bash scripts/build-wheelhouse-full.sh >/dev/null

# Every scenario, two at a time (MOLECULE_LANES=1 for one after another).
molecule: setup image wheelhouse-full
	bash scripts/molecule-all.sh

# The full check; it fails if it leaves the working tree dirtier than it found it. Molecule's
# scenarios (two lanes, mostly waiting on systemd and polls) run beside the other steps, which
# run one after another; each side's output is printed whole when it ends.
test: host-packages
	@bash scripts/tree-unchanged.sh $(MAKE) --no-print-directory test-steps

test-steps: setup
	$(MAKE) --no-print-directory -j2 --output-sync=target test-serial molecule

test-serial: setup
	$(MAKE) --no-print-directory -j1 lint sanity collection-test ee unit-all crash integration bench

# The demo host's ml-env is the full SGLang install (its wheels mounted read-only from
# .cache/wheelhouse-demo: scripts/build-wheelhouse-demo.sh), so the proof runs SGLang's own
# benchmark there, with a tokenizer made for the demo (the server's tokenizer-path; no hub); a
# container made before that mount existed is refused, with what to run.
demo: setup image wheelhouse-full
	bash scripts/build-wheelhouse.sh >/dev/null
	bash scripts/build-wheelhouse-demo.sh >/dev/null
	@if podman container exists $(DEMO_HOST) && ! podman inspect $(DEMO_HOST) \
	    --format '{{range .Mounts}}{{.Destination}} {{end}}' | grep -q wheelhouse-demo; then \
	  echo "$(DEMO_HOST) was made without the demo's wheelhouse: make demo-clean, then make demo"; \
	  exit 1; fi
	podman container exists $(DEMO_HOST) || podman run -d --name $(DEMO_HOST) --hostname $(DEMO_HOST) \
	  --runtime=runc --systemd=always --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
	  -v $(CURDIR)/.cache/wheelhouse-demo:/var/cache/sglang-deploy/wheelhouse-demo:ro $(IMAGE) /sbin/init
	podman exec $(DEMO_HOST) systemctl is-system-running --wait || true
	podman exec $(DEMO_HOST) mkdir -p /srv/models/Qwen3.6-27B
	echo '{"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"}' | \
	  podman exec -i $(DEMO_HOST) tee /srv/models/Qwen3.6-27B/config.json >/dev/null
	podman exec -i $(DEMO_HOST) python3 - /srv/models/demo-tokenizer <tests/support/make_tokenizer.py
	ansible-playbook -i inventory/demo deploy.yml
	@echo "--- a streamed completion from the demo host (stand-in engine, 3 tokens per chunk as MTP) ---"
	@# The key goes through stdin (curl -H @-), never a command line.
	printf 'Authorization: Bearer %s\n' "$$(cat $(HOME)/.cache/sglang-deploy/demo-api-key)" | \
	  podman exec -i $(DEMO_HOST) curl -sN http://127.0.0.1:30000/v1/completions -H @- \
	  -H 'Content-Type: application/json' \
	  -d '{"model": "qwen3.6-27b", "prompt": "Hello", "max_tokens": 7, "stream": true}'
	@echo "--- run it again: nothing changes, nothing restarts ---"
	ansible-playbook -i inventory/demo deploy.yml

demo-clean:
	podman rm -f $(DEMO_HOST)
