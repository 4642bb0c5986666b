"""`python3 -m aks_flex_node.config default`: print the default configuration file."""

import sys

from aks_flex_node.config import main

sys.exit(main())
