# splitdns: `make run` to try it, `make test` to check everything. Both work as root on a
# fresh Debian/Ubuntu machine: they install what they need.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages the tests drive for real: clients (dig, dnsperf), servers used as
# upstreams and peers (nsd, unbound, dnsmasq), dnssec-keygen/-signzone for the signed zones of
# the differential test, OpenVPN and the namespace plumbing, Prometheus and promtool (the alerts'
# unit tests, the dashboard's queries against a real Prometheus), tmux (`splitdns top` on a screen).
# musl-tools: musl-gcc builds the musl getaddrinfo client of the search-walk lab (musl's resolver
# walks a search list unlike glibc's).
DEBIAN_PACKAGES := bind9-dnsutils bind9-utils dnsperf nsd unbound dnsmasq-base openvpn \
	iptables iproute2 procps psmisc openssl python3-venv prometheus tmux musl-tools
# WireGuard for the lab, userspace (no kernel module here), without recommends: wireguard-tools
# recommends a kernel image as the provider of its module.
WIREGUARD_PACKAGES := wireguard-go wireguard-tools
# OpenConnect and strongSwan for the labs, without recommends: ocserv and openconnect with the stock
# vpnc-script; two charon-systemd (no pid file, so two run side by side) loaded by swanctl, with
# kernel-libipsec (userspace ESP over tun: no kernel XFRM here) from libcharon-extra-plugins; the
# attr and resolve plugins come with libstrongswan.
VPN_PACKAGES := ocserv openconnect vpnc-scripts charon-systemd strongswan-swanctl libcharon-extra-plugins
# What tests/test_image.py builds and runs the image with: podman (runc as its runtime) and
# mmdebstrap for a base image made from Debian packages. Installed without recommends: podman's
# (buildah, fuse-overlayfs, slirp4netns, ...) are not used.
IMAGE_PACKAGES := podman runc mmdebstrap

# $(call apt_missing,PACKAGES[,APT OPTIONS]): installs those of PACKAGES not installed yet, so a
# machine that has everything makes no network call; a policy-rc.d keeps Debian from starting the
# servers it installs (the tests and benchmarks run their own copies on loopback).
define apt_missing
	@missing=""; for p in $(1); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		guard=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
			printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && guard=1; \
		fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) $$missing >/dev/null; \
		rc=$$?; if [ -n "$$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi; [ $$rc -eq 0 ]; \
	fi
endef

.PHONY: run install test test-fast test-e2e test-hostile venv deps-debian deps-image lint typecheck pytest lab-up lab-down lab-status clean

run: $(VENV)/.run-installed
	$(BIN)/splitdns demo

# splitdns and what its commands need (pyproject's dependencies: the resolver's, uvloop, and render
# and check's validators), not the test tools nor the webhook extra; pip's own progress is shown,
# since a first run downloads for a while.
$(VENV)/.run-installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing splitdns and what its commands need into $(VENV) (the test tools come with make test)"
	$(BIN)/pip install --progress-bar on -e .
	touch $@

# The CLI on PATH: /usr/local/bin/splitdns, a link to the virtualenv's (what `make run` set up).
install: $(VENV)/.run-installed
	ln -sf $(CURDIR)/$(BIN)/splitdns /usr/local/bin/splitdns
	@echo "splitdns is /usr/local/bin/splitdns (a link to $(CURDIR)/$(BIN)/splitdns)"

test: deps-debian deps-image venv lint typecheck pytest

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@echo "installing splitdns with everything the tests need (pytest, hypothesis, ruff, mypy, import-linter, kubectl, the webhook's aiohttp and jsonpatch, the benchmark's matplotlib, top's rich) into $(VENV)"
	$(BIN)/pip install --progress-bar on -e '.[test,webhook,bench,top]'
	touch $@ $(VENV)/.run-installed $(VENV)/.bench-installed

deps-debian:
	$(call apt_missing,$(DEBIAN_PACKAGES))
	$(call apt_missing,$(WIREGUARD_PACKAGES),--no-install-recommends)
	$(call apt_missing,$(VPN_PACKAGES),--no-install-recommends)
	@# A kubectl on PATH for the kubectl-plugin test: Debian's kubernetes-client (1.20), unless one is
	@# there. (The kustomize Component test needs kubectl >= 1.21: the venv's, from the test extra.)
	@command -v kubectl >/dev/null 2>&1 || { echo "installing Debian packages: kubernetes-client"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client >/dev/null; }
	@# Debian starts the servers it installs (the policy-rc.d above holds them on a first install);
	@# the tests run their own copies on loopback.
	@for s in nsd unbound prometheus prometheus-node-exporter; do systemctl stop $$s >/dev/null 2>&1 || true; done

deps-image:
	$(call apt_missing,$(IMAGE_PACKAGES),--no-install-recommends)

lint: venv
	$(BIN)/ruff check src tests bench tools
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

# Two tiers, the fast one first: the codec, the core's transcripts, the shell in process,
# parsers, kube and the CLI (under 90 s on 2 cores); then the end-to-end one: real processes
# and servers, the namespace labs, the image, the differential run, the quick hostile catalogue
# (tests/conftest.py lists its modules). Plain `pytest` runs both.
# The fast tier runs on every core (pytest-xdist): it is about 100 CPU-seconds, nearly all of
# it Python (the property tests), which one process spent on one of the two cores.
FAST = -m "not e2e and not hostile" -n auto
E2E = -m "e2e and not hostile"

# The end-to-end tier names each module as it starts (a module can take a minute), not only dots.
E2E_OUTPUT = --no-header

pytest: venv
	$(BIN)/python -m pytest -q $(FAST)
	$(BIN)/python -m pytest $(E2E_OUTPUT) $(E2E)

test-fast: venv
	$(BIN)/python -m pytest -q $(FAST)

test-e2e: deps-debian deps-image venv
	$(BIN)/python -m pytest $(E2E_OUTPUT) $(E2E)

# The hostile-input catalogue (tests/test_hostile_*.py: spoofing, upstream faults, hostile clients,
# cache and load, lifecycle): the core set, the slow rest
# (@pytest.mark.hostile; also a WireGuard peer dying past its 180 s), then a 10-minute soak
# with faults on a schedule; figures in results/hostile.md.
test-hostile: deps-debian venv
	@mkdir -p results && rm -f results/hostile-figures.txt
	@status=0; \
	SPLITDNS_FIGURES=results/hostile-figures.txt $(BIN)/python -m pytest -q -s -m "hostile or not hostile" \
		tests/test_hostile_spoofing.py tests/test_hostile_upstream.py tests/test_hostile_clients.py \
		tests/test_hostile_cache_load.py tests/test_properties.py tests/test_server_inprocess.py \
		tests/test_lifecycle_inprocess.py || status=$$?; \
	$(BIN)/python -m pytest -q -s -m hostile tests/test_wireguard_lab.py || status=$$?; \
	$(BIN)/python -m tests.hostile_soak --minutes 10 --figures results/hostile-figures.txt \
		--out results/hostile.md || status=$$?; \
	exit $$status

lab-up: deps-debian venv
	$(BIN)/python -m tests.lab up

lab-down: venv
	$(BIN)/python -m tests.lab down

lab-status: venv
	$(BIN)/python -m tests.lab status

clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis

# `make bench`: splitdns side by side with Unbound, dnsmasq and dnsdist (bench/README.md).
# Not part of `make test` or CI. BENCH_ARGS=--quick for a 2-minute check.
BENCH_PACKAGES := dnsperf nsd unbound dnsmasq-base dnsdist
BENCH_ARGS ?=

.PHONY: bench deps-bench
bench: deps-bench $(VENV)/.bench-installed
	$(BIN)/python -m bench.check_scale
	$(BIN)/python -m bench.run $(BENCH_ARGS)
	$(BIN)/python -m bench.search_walk

$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[test,webhook,bench,top]'
	touch $@

deps-bench:
	$(call apt_missing,$(BENCH_PACKAGES))
