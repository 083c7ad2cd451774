"""The exit codes the dispatcher and the commands share (sysexits.h where one fits)."""

EXIT_USAGE = 64
"""A usage or config error (sysexits.h EX_USAGE). No verdict of `check` uses it, so a CI gate
can tell "typo in a flag" from "disable speculation" (2)."""
EXIT_UNAVAILABLE = 69
"""The command needs a dev tool this installation leaves out (sysexits.h EX_UNAVAILABLE)."""
EXIT_INTERRUPTED = 130
