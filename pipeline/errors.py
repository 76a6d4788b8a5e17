"""The exceptions the command line prints as one line: bad input (exit 2), and failures that are not the
input's (exit 1)."""


class UserError(Exception):
    """A problem the user can fix (a bad option, file or value); the message names it in one line."""


class TrainingFailed(Exception):
    """Training ran but could not go on (for example its loss became NaN); not the input's fault."""


class ServerLost(Exception):
    """A server a running command works with went away (the database server, the Dask scheduler): the
    environment's failure, not the input's. The message names the server (never a password) in one line."""


class DatabaseFault(Exception):
    """The database's file or the disk under it failed (read-only, full, damaged), or its server's disk: the
    environment's failure, not the input's. The message names the database, the cause and what to do in one line."""
