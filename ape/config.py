"""``ape.config``: read one ``config.toml`` (the loader lives in :mod:`ape.tasks.storage.config_file`,
below the flows, so the served flow can read its owner's file too)."""

from __future__ import annotations

from ape.tasks.storage.config_file import load_config, locate

__all__ = ["load_config", "locate"]
