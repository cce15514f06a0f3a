# Each target sets up .venv itself (scripts/setup-venv.sh), so both work on a fresh clone.
# `make demo SGLANG=0.5.22` runs the same demo on another sglang release (its own venv over
# .venv's CPU stack: scripts/setup-release-venv.sh).
.PHONY: demo test setup

SGLANG ?=

demo:
ifeq ($(SGLANG),)
	@bash scripts/setup-venv.sh
	.venv/bin/mcinspect demo --headless
else
	@bash scripts/setup-release-venv.sh $(SGLANG) > /dev/null
	.venv-sglang-$(SGLANG)/bin/mcinspect demo --headless
endif

test: setup
	.venv/bin/pytest

setup:
	@bash scripts/setup-venv.sh
