"""The tools around the run, each run from the project root: python -m tools.NAME."""
