"""The exit codes of ``ape``: 0 success, 1 a run whose items failed, 2 bad input (one line
naming the file and key), 3 a regression under ``--fail-on-regression``, 130 Ctrl-C."""

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_REGRESSED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130
