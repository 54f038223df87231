"""Deployments: ``serve`` (the entry point of ``ape serve``) and ``prefect.yaml`` (package data).

It may import ``ape.flows``, ``ape.tasks`` and ``ape.schemas``; nothing imports it but the
command line.
"""
