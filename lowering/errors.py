"""The one exception type users see: its message is a single line fit for a terminal."""


class LoweringError(Exception):
    """Bad input or an impossible request; the CLI prints the message and exits with code 2."""
