from aks_flex_node.cli import run

run()
