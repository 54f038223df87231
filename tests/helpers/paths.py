"""Where the repository is, for tests that read its examples, README and sources."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
