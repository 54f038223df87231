"""``python -m ape config.toml`` runs a benchmark, like ``ape run config.toml``."""

from ape.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
