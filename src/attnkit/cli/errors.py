"""The error type the CLI turns into a one-line message and exit status 2."""


class UsageError(Exception):
    """Bad user input on the command line (a malformed vector, a missing file)."""
