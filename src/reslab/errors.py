"""Errors that reach a user as one clear line (no traceback)."""


class ReslabError(Exception):
    """A problem with the user's input: printed as its message lines, exit status 2."""

    def lines(self) -> list[str]:
        return [str(self)]


class ConfigError(ReslabError):
    """One or more invalid configuration fields. Each error names its field path."""

    def __init__(self, errors: list[str] | str):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))

    def lines(self) -> list[str]:
        return self.errors
