"""Example benchmarks shipped with APE (installed as package data under ``ape.examples``).

Each folder holds a runnable ``config.toml`` with its data, prompt and plugins; ``ape demo``
reads the ten-task fixture in ``demo/``. Copy a folder to start a benchmark of your own.
"""
