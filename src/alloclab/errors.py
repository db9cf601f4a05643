"""The one error type users see: a single line naming the problem and the fix (exit code 2)."""


class UserError(Exception):
    """Bad input or an environment problem the user can fix. The CLI prints str(self), exits 2."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem} — {fix}" if fix else problem)
