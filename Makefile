# The two commands a new user needs: `make lab` and `make test` (see README.md).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_FORCE_COLOR ?= 0
COLLECTION := collections/ansible_collections/ai_platform/l1
SCENARIOS := $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))

.PHONY: bootstrap image lab lab-prerequisites lab-supplies lab-artifacts lab-up lab-down lab-status test lint ee sanity unit molecule molecule-scenarios integration integration-tests conformance

bootstrap:
	bash lab/bootstrap.sh

image: bootstrap
	python lab/labctl.py image

## make lab: build the 6-node lab and roll out playbooks/site.yml against it.
lab: bootstrap lab-supplies lab-artifacts
	python lab/labctl.py up
	ansible-playbook -i inventories/lab/hosts.yml playbooks/site.yml

# Controller-side files the lab rollout copies to nodes: none. The upstream files the lab does not
# build (artifacts/manifest.yml's pure-Python wheels, nvidia-ml-py included) are downloaded into
# /var/cache/ai-l1/wheels, sha256 verified, and served by lab/mirror/mirror.py up (lab-artifacts).
lab-supplies: bootstrap
	@:

# The air-gapped supply chain: the upstream source archives of artifacts/sources.yml copied into
# the source cache, checked (lab/sources.py; from ../shared/src or $AI_L1_SOURCE_DIRS); Kubernetes,
# etcd, CoreDNS, CNI built from Go modules and NVIDIA's device plugin from its archive (cached
# under /var/cache/ai-l1; about 25 min cold, seconds warm), the NVIDIA vendor APT repositories
# (lab/packages/nvidia, about 3 s cold, 1 s warm), the Ascend .run installers (lab/packages/ascend,
# under 1 s), then served by the local file mirror and
# registry the lab nodes use.
lab-artifacts: bootstrap
	python lab/sources.py fill
	python lab/charts/build.py
	bash lab/k8s/build.sh
	python lab/packages/nvidia/build.py
	python lab/packages/ascend/build.py
	python lab/mirror/mirror.py up

lab-up: bootstrap
	python lab/labctl.py up

# Upstream [Conformance] tests against a running lab (make lab first); too long for make test.
conformance: bootstrap
	python lab/conformance/conformance.py build
	python lab/conformance/conformance.py run

lab-down:
	python lab/labctl.py down

lab-status:
	python lab/labctl.py status

## make test: every gate; the first that fails fails the run. tests/stages.py starts each
## once what it waits for has passed (ready ones side by side) and prints each duration.
test:
	python3 tests/stages.py

# The node image and the lab's artifacts: what molecule and the integration tests start from.
lab-prerequisites: image lab-supplies lab-artifacts

lint:
	yamllint -s .
	ruff check .
	ansible-lint --profile production
	cd $(COLLECTION) && antsibull-changelog lint

# The AWX execution environment's build context from execution-environment.yml: the collection's
# tarball (galaxy.yml's build_ignore applies), then `ansible-builder create` (writes files only, no
# registry). Building the image needs a registry and is left to the site (day2/README.md, "AWX").
ee: bootstrap
	rm -rf .cache/ee
	ansible-galaxy collection build --force --output-path .cache/ee/collection $(COLLECTION)
	ansible-builder create -f execution-environment.yml --context .cache/ee/context

sanity:
	bash tests/sanity.sh

# --dist loadfile: a test file's tests share one worker, so a module fixture (a playbook run the
# file's tests read) runs once, not once per worker (7 min 12 s against 10 min 18 s with --dist load).
unit:
	python -m pytest -q -n auto --dist loadfile --durations=10 tests/unit

# lab-artifacts: scenarios install vendor packages from the lab's files mirror (nvidia_stack).
# molecule-scenarios and integration-tests are the same without their prerequisites: make test
# builds those once, before both (tests/stages.py).
molecule: image lab-artifacts
	@$(MAKE) --no-print-directory molecule-scenarios

molecule-scenarios:
	@for s in $(SCENARIOS); do echo "== molecule test -s $$s"; molecule test -s $$s || exit 1; done

integration: image lab-supplies lab-artifacts
	@$(MAKE) --no-print-directory integration-tests

integration-tests:
	python -m pytest -q --durations=0 --durations-min=5 tests/integration
