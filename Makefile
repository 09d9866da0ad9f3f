# RCLL: `make run` starts the server on the embedded database (WORKERS=N: on a local Citus cluster);
# `make test` runs every test.
PG_CONFIG ?= $(shell .venv/bin/python -c "from rcll.cluster import embedded_bindir; print(embedded_bindir() / 'pg_config')" 2>/dev/null || echo pg_config)
PY = .venv/bin/python

.PHONY: run test test-setup system-packages bootstrap bootstrap-test pg15-leg browser ha-cluster bench-failover citus node-client typescript-client typescript-types extension install lint bench bench-retain bench-recall bench-locomo

# WORKERS=N (`make run WORKERS=2`): the server on a throwaway local Citus cluster instead, a
# coordinator and N workers on 127.0.0.1 from CITUS_PORT (9700, workers 9701...; Citus built by
# `make citus`), stopped and removed, data included, when the server stops (docs/scaling.md).
WORKERS ?= 0
CITUS_PORT ?= 9700
run: bootstrap extension $(if $(filter-out 0,$(WORKERS)),citus)
	.venv/bin/rcll serve $(if $(filter-out 0,$(WORKERS)),--citus-workers $(WORKERS) --citus-port $(CITUS_PORT))

# One pytest-xdist worker more than the cores, whole files each: a test waiting on a server, a
# subprocess or a failover leaves its core to the others (with one a core, two cores sat 11% idle
# over a run). TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
# Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set: every `rcll` subprocess, server
# and plpython3u backend a test starts would otherwise compile rcll's modules from source again,
# and pytest rewrite every test module in each worker.
test: test-setup
	env -u PYTHONDONTWRITEBYTECODE .venv/bin/pytest -n $(TEST_WORKERS) --dist loadfile --durations=15 tests

# The suite's set-up: pip's and npm's installs side by side (they wait on the disk and the
# registries more than on a core), the system packages one apt at a time, then the scripts, then
# Citus (built into the venv's embedded PostgreSQL, so after the venv; it needs the compiler the
# PG 15 leg installs).
test-setup:
	@$(MAKE) --no-print-directory -j4 -O bootstrap-test node-client typescript-client system-packages
	@$(MAKE) --no-print-directory extension
	@$(MAKE) --no-print-directory citus

system-packages:
	@$(MAKE) --no-print-directory pg15-leg
	@$(MAKE) --no-print-directory browser
	@$(MAKE) --no-print-directory ha-cluster

# node-postgres for tests/test_node_client.py (SQL recall from Node.js): installed once from the lock file.
node-client: tests/node/node_modules/.package-lock.json

tests/node/node_modules/.package-lock.json: tests/node/package.json tests/node/package-lock.json
	cd tests/node && npm ci --no-audit --no-fund --loglevel=error

# The TypeScript client's dev dependencies (tsc, openapi-typescript, Node's types) for
# tests/test_typescript_client.py: installed once from the lock file. The package itself has none.
typescript-client: clients/typescript/node_modules/.package-lock.json

clients/typescript/node_modules/.package-lock.json: clients/typescript/package.json clients/typescript/package-lock.json
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error

# After changing an HTTP endpoint: regenerate the client's types from the API's schema (the app's
# /openapi.json, without a server); a test compares the committed file with a live server's.
typescript-types: typescript-client
	@schema=$$(mktemp --suffix=.json) && trap 'rm -f "$$schema"' EXIT && \
	$(PY) -c "import json; from rcll.http import create_app; print(json.dumps(create_app('postgresql:///unused').openapi()))" > "$$schema" && \
	cd clients/typescript && RCLL_SCHEMA="$$schema" npm run --silent generate

bootstrap:
	scripts/bootstrap

bootstrap-test:
	scripts/bootstrap test

# Debian PostgreSQL 15 + pgvector (built from Debian's source package) + plpython3u: the second test
# leg. Needs root (or sudo without a password); without either, the suite runs pg18 alone and says so.
pg15-leg:
	@scripts/install-pg15-leg.sh

# Debian's chromium + chromium-driver: tests/test_console.py drives the console with them (Selenium).
# Needs root as pg15-leg does; without it the browser tests are skipped with one line saying why.
browser:
	@scripts/install-browser.sh

# etcd-server (Debian's) and Patroni in a venv the servers' OS user can run (/var/cache/rcll):
# tests/test_failover.py and bench/failover.py start a Patroni cluster with them (scripts/ha-cluster).
ha-cluster:
	@scripts/ha-cluster install

# Citus from ../shared/citus (checked against its SHA256SUMS) into the venv's embedded PostgreSQL 18,
# for rcll.citus_cluster's three-node cluster (tests, benchmarks): about half a minute the first time, a stamp check after.
# Run as the venv's owner: as root it installs liblz4-dev and libzstd-dev when missing; another
# user without them gets one line saying the Citus tests skip.
citus:
	@scripts/build-citus.sh

# Build the scripts of the version under development (extension/rcll--X.Y.Z.sql, the update
# scripts to it, catalog.json) from sql/, when a source is newer: extension/Makefile. Not committed.
# No bootstrap prerequisite: the targets that need it name their own before this one.
extension:
	@$(MAKE) -s -C extension scripts

# PGXS install of the extension into the server that PG_CONFIG names (builds the scripts first).
install:
	$(MAKE) -C extension install PG_CONFIG=$(PG_CONFIG)

lint: bootstrap-test
	.venv/bin/ruff check python tests bench research
	.venv/bin/mypy

bench: bench-retain bench-recall bench-locomo

bench-retain: bootstrap
	$(PY) -m bench.retain

bench-recall: bootstrap
	$(PY) -m bench.recall

bench-locomo: bootstrap
	$(PY) -m bench.locomo.run

# Failover drills on a local Patroni cluster (ports 26200-26232): not part of `make bench`.
bench-failover: bootstrap ha-cluster extension
	$(PY) -m bench.failover
