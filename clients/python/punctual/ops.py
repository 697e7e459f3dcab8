"""What an operation's generator yields (producer.py, "one body, two
drivers"): a command for Redis (:class:`_Cmd`), commands sent together
(:class:`_Pipe`), or a pause (:class:`_Sleep`). The producer's drivers run
them against a blocking or an asyncio client; ``schedules`` yields them
too. Imports nothing of the package.
"""


class _Cmd:
    __slots__ = ("name", "args", "kwargs")

    def __init__(self, name: str, *args, **kwargs):
        self.name, self.args, self.kwargs = name, args, kwargs


class _Pipe:
    """Commands sent together, without waiting for each reply (one round
    trip); the replies come back as a list."""

    __slots__ = ("cmds",)

    def __init__(self, *cmds: _Cmd):
        self.cmds = cmds


class _Sleep:
    __slots__ = ("seconds",)

    def __init__(self, seconds: float):
        self.seconds = seconds
