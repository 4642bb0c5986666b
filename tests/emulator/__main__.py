import sys

from tests.emulator.server import main

sys.exit(main())
