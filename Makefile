# The two commands a newcomer needs:
#   make serve  set up .venv and run the main job, a pod (tenure serve), on the embedded default
#   make test   set up .venv and run the whole test suite (then a subset without root's file powers)
# Also: make demo (checkpoint and restore a folder, the storage side on its own).
# Also: make mutants (named one-line mutants against chosen tests; not part of make test).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: serve demo test test-unprivileged mutants setup bench bench-beat bench-durable bench-autosave bench-serve bench-cluster bench-handover rolling-restart bench-reconcile bench-journal fuzz-api verify-cluster docs lint clean

# Restore, snapshot and intake file tests that run a second time without root's power over file modes
# (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a permission bug that root would hide fails (about 30 s).
# Not root: they run as they are. Root: setpriv (util-linux) drops the two capabilities.
UNPRIVILEGED_TESTS := \
	tests/integration/snapshots/test_special.py \
	tests/integration/snapshots/test_special_bits.py \
	tests/integration/snapshots/test_restore_states.py \
	tests/integration/snapshots/test_damage.py \
	tests/integration/snapshots/test_roundtrip.py::test_random_trees_round_trip \
	tests/integration/snapshots/test_journal.py \
	tests/integration/snapshots/test_journal_build.py \
	tests/integration/snapshots/test_journal_hub.py \
	tests/integration/intake/test_admission.py \
	tests/integration/intake/test_api_layout.py \
	tests/integration/intake/test_durable_dirs.py
DAC_CAPS    := -dac_override,-dac_read_search
WITHOUT_DAC := $(shell [ "$$(id -u)" = 0 ] && echo setpriv --inh-caps=$(DAC_CAPS) --bounding-set=$(DAC_CAPS) --)

$(BIN)/tenure: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/tenure

setup: $(BIN)/tenure

serve: setup
	$(BIN)/tenure serve

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

test: setup
	$(BIN)/python -m pytest -n 2 -q
	$(MAKE) --no-print-directory test-unprivileged

test-unprivileged: setup
	$(WITHOUT_DAC) $(BIN)/python -m pytest -n 2 -q -p no:cacheprovider $(UNPRIVILEGED_TESTS)

mutants: setup
	$(BIN)/python scripts/mutants.py

bench: setup
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/projects_bench.py
	$(BIN)/python benchmarks/intake_bench.py
	$(BIN)/python -m benchmarks.intake_hostile

# A pod's beat at 1k/10k/100k held projects against per-row renewal, SQLite and PostgreSQL (about 1.5 minutes).
bench-beat: setup
	$(BIN)/python -m benchmarks.beat_bench

# tenure serve processes: takeover after kill -9 on PostgreSQL, a bring through the HTTP API against in-process,
# request rate against a uvicorn hello world, the store work of a bring before and after c5fd6de (about 5 minutes).
bench-serve: setup
	$(BIN)/python -m benchmarks.serve_bench

# Durable writes: a 4 KiB durable PUT against a plain one and a plain one plus fsync; 50 concurrent durable
# writers' group commit (about 30 s).
bench-durable: setup
	$(BIN)/python -m benchmarks.durable_bench

# Autosave cost: pod CPU with 1,000 running projects of which 1% write, autosave on against off (~3 min).
bench-autosave: setup
	$(BIN)/python -m benchmarks.autosave_bench

# Cluster master: tick time at 10k-1M projects, placement evenness, takeover after kill -9, with baselines (~6 min).
bench-cluster: setup
	$(BIN)/python -m benchmarks.cluster_bench

# A drain of a pod holding 100 projects and a rolling restart of 3 pods, each against kill -9 (about 4 minutes).
bench-handover: setup
	$(BIN)/python -m benchmarks.handover_bench

# Restart 3 pods one by one under client traffic: no answer other than 2xx or a 503 with Retry-After.
rolling-restart: setup
	$(BIN)/python -m benchmarks.handover_bench --only rolling

# Restart reconciliation of 1,000 mounts at pod start on SQLite, against a bare walk of the same folders
# (about 2 minutes).
bench-reconcile: setup
	$(BIN)/python -m benchmarks.reconcile_bench

# A checkpoint after a 10-file edit in a 100,000-file folder: with the change journal, walking, a bare walk (about 1 minute).
bench-journal: setup
	$(BIN)/python -m benchmarks.journal_bench

# Schemathesis over the pod API's OpenAPI document with 200 examples per operation (about a minute).
fuzz-api: setup
	TENURE_FUZZ_EXAMPLES=200 $(BIN)/python -m pytest -q -p no:cacheprovider tests/integration/pod/test_api_fuzz.py

# tenure verify cluster for 10 minutes: 3 pods, every fault kind, the history checked (docs/operations.md,
# "Verifying a cluster"). VERIFY_DB names a PostgreSQL database of its own; VERIFY_SEED picks the run;
# VERIFY_PG_RESTART is the command the pg-restart fault runs (it restarts the server every other user of it
# shares; empty: the fault is skipped); the skew fault needs faketime (Debian's faketime package).
VERIFY_DB   ?= postgresql://postgres@127.0.0.1:5432/tenure_verify
VERIFY_SEED ?= 1
VERIFY_PG_RESTART ?= pg_ctlcluster --skip-systemctl-redirect $(shell ls /etc/postgresql 2>/dev/null | head -n 1) main restart
verify-cluster: setup
	$(BIN)/tenure verify cluster --db $(VERIFY_DB) --pods 3 --projects 6 --duration 600 --seed $(VERIFY_SEED) \
		$(if $(strip $(VERIFY_PG_RESTART)),--pg-restart-cmd "$(VERIFY_PG_RESTART)")

docs: setup
	$(BIN)/python -m tenure.cli.docs docs/machines

lint: setup
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .tenure build *.egg-info
