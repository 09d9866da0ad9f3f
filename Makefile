# RCLL: `make run` starts the server on the embedded database; `make test` runs every test.
PG_CONFIG ?= $(shell .venv/bin/python -c "from rcll.cluster import embedded_bindir; print(embedded_bindir() / 'pg_config')" 2>/dev/null || echo pg_config)
PY = .venv/bin/python

.PHONY: run test bootstrap bootstrap-test pg15-leg browser extension install lint bench bench-retain bench-recall bench-locomo

run: bootstrap
	.venv/bin/rcll serve

test: bootstrap-test pg15-leg browser
	.venv/bin/pytest tests

bootstrap:
	scripts/bootstrap

bootstrap-test:
	scripts/bootstrap test

# Debian PostgreSQL 15 + pgvector (built from Debian's source package) + plpython3u: the second test leg.
pg15-leg:
	@if [ "$$(id -u)" = 0 ]; then scripts/install-pg15-leg.sh; else sudo scripts/install-pg15-leg.sh; fi

# Debian's chromium + chromium-driver: tests/test_console.py drives the console with them (Selenium).
browser:
	@if [ "$$(id -u)" = 0 ]; then scripts/install-browser.sh; else sudo scripts/install-browser.sh; fi

# Regenerate extension/rcll--X.Y.Z.sql from sql/ (committed; a test fails when it is stale).
extension: bootstrap
	$(PY) -m rcll.build_extension

# PGXS install of the extension into the server that PG_CONFIG names.
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
