"""Running model-written code: the sandbox (Linux namespaces), the harness inside it, and code_exec.

May import what ``ape.tasks.checking`` may import; nothing of ``checking`` above it.
"""
