# The emulator fixtures (tests/conftest.py re-exports them too; the emulator is shared either way).
from tests.emulator_fixtures import emulator, fresh_emulator  # noqa: F401
