# Each target sets up .venv itself (scripts/setup-venv.sh), so both work on a fresh clone.
.PHONY: demo test setup

demo: setup
	.venv/bin/mcinspect demo --headless

test: setup
	.venv/bin/pytest

setup:
	@bash scripts/setup-venv.sh
