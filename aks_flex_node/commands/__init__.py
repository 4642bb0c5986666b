"""The command line: its grammar (arguments.py); cli.py runs the commands."""
