"""The exit codes of the ``streamdi`` process, shared by the CLI (:mod:`cli.commands`) and the
composition root (``streamdi serve`` returns its code from :func:`runtime.serve.serve`).

0 success, 1 a failure while running, 2 bad usage or bad configuration, 3 a service the command
talks to does not answer.
"""

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: A service or resource the command needs does not answer (``streamdi status|pause|resume``).
EXIT_UNAVAILABLE = 3
