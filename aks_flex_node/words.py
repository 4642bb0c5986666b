"""WordEnum: an enum whose members are the words we write (in the configuration, the
ledger, status.json, the agent's pipe) and read back.

A member is a str, so JSON, debconf and a comparison with the word read from a file carry
it as the word itself. __str__ and __format__ say so on every Python we run on: 3.10
(Ubuntu 22.04) has no enum.StrEnum, and format() of a str mix-in changed in 3.12.
Stdlib only: the token plugin's light path and the agent's resident parent import it.
"""

import enum


class WordEnum(str, enum.Enum):
    def __str__(self):
        return self.value

    def __format__(self, spec):
        return format(self.value, spec)
