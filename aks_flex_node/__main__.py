import sys

from aks_flex_node.cli import main

sys.exit(main())
