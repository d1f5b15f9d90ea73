class WalkthroughError(Exception):
    """A problem the user can fix (not a repository, bad range, a step that does not apply): the CLI
    prints its one-line message and exits non-zero."""
