"""The exit codes of ``ape``: 0 success, 1 a run whose items failed, 2 bad input (one line
naming the file and key), 3 a regression under ``--fail-on-regression``, 4 a run drained
(``ape ctl drain``: ended resumably, the same command goes on), 130 Ctrl-C."""

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_REGRESSED, EXIT_DRAINED = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130
