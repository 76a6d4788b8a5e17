"""The one exception for bad input: the command line prints its message as one line and exits 2."""


class UserError(Exception):
    """A problem the user can fix (a bad option, file or value); the message names it in one line."""


class TrainingFailed(Exception):
    """Training ran but could not go on (for example its loss became NaN); not the input's fault."""
