# Two commands on a fresh Debian/Ubuntu machine (as root, or with sudo):
#   make demo   set up, then deploy SGLang (stand-in engine) into a local systemd container
#   make test   set up, then lint + unit tests + molecule
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export SGLANG_DEPLOY_WHEELHOUSE ?= $(CURDIR)/.cache/wheelhouse
export ANSIBLE_FORCE_COLOR ?= 0
export PY_COLORS ?= 0
DEMO_HOST ?= sglang-demo
IMAGE ?= localhost/sglang-deploy-host:bookworm

.PHONY: setup host-packages wheelhouse-full lint sanity collection collection-test unit integration bench molecule test demo demo-clean

setup: host-packages $(VENV)/.installed

host-packages:
	@bash scripts/install-host-packages.sh

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	touch $@

lint: setup sanity
	yamllint .
	ansible-lint
	set -e; for playbook in deploy.yml playbooks/*.yml; do ansible-playbook "$$playbook" --syntax-check; done

# The repository is the sglang.deploy collection: built as it stands (galaxy.yml's build_ignore
# leaves out the tooling and tests) into dist/sglang-deploy-<version>.tar.gz.
collection: setup
	python scripts/filter_docs.py --check
	ansible-galaxy collection build --force --output-path dist >/dev/null

# ansible-test sanity on the built collection (Python 3.11, without network or containers;
# its tools' venvs are cached by ansible-test in ~/.ansible/test, outside the clone).
sanity: collection
	bash scripts/sanity.sh

# Installed with ansible-galaxy into a temporary path and used from another directory.
collection-test: collection
	bash scripts/test-collection.sh dist/sglang-deploy-$$(python -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])').tar.gz

unit: setup
	pytest tests/unit

# Real SGLang releases (0.5.12, 0.5.15, 0.5.23) asked what they resolve: full installs built
# once with uv by scripts/build-sglang-venv.sh, cached in ~/.cache/sglang-deploy/full-venvs.
integration: setup
	pytest tests/integration

# How exact the smoke test is: against the stand-in at a known speed; fails beyond 3%.
bench: setup
	python tests/bench/bench_smoke.py

# The full sglang install's wheels for molecule/real (~4 GB, ~1 min once; cached outside the
# clone in ~/.cache/sglang-deploy/wheelhouse-full/, keyed by version, Python and pinned set).
wheelhouse-full: setup
	bash scripts/build-wheelhouse-full.sh >/dev/null

# Every scenario, two at a time (MOLECULE_LANES=1 for one after another).
molecule: setup wheelhouse-full
	bash scripts/molecule-all.sh

test: lint collection-test unit integration bench molecule

demo: setup
	bash scripts/build-test-image.sh
	bash scripts/build-wheelhouse.sh >/dev/null
	podman container exists $(DEMO_HOST) || podman run -d --name $(DEMO_HOST) --hostname $(DEMO_HOST) \
	  --runtime=runc --systemd=always --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 $(IMAGE) /sbin/init
	podman exec $(DEMO_HOST) systemctl is-system-running --wait || true
	podman exec $(DEMO_HOST) mkdir -p /srv/models/Qwen3.6-27B
	echo '{"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"}' | \
	  podman exec -i $(DEMO_HOST) tee /srv/models/Qwen3.6-27B/config.json >/dev/null
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
