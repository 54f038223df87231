"""Helpers shared by the tests: benchmark folders, loopback servers, attacks, concurrency gates."""
