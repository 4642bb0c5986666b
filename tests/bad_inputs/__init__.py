"""The bad-input corpus (issue 9): every bad value, flag, file state, environment variable
and preseeded answer an operator can give, as data, run through the CLI as an operator runs it.

  data/*.json   the cases, one file per family (the format is in corpus.py)
  corpus.py     loads and checks the data files into Case values
  node.py       one case: a scratch node root, the command as a subprocess, the root's
                snapshot before and after, the verdict
  report.py     the table by family and the list of failing cases
  __main__.py   `python3 -m tests.bad_inputs` (make bad-inputs): every case, in parallel
  test_corpus.py  the same cases, one pytest test each (make test)

Each case asserts what docs/design.md promises of any bad input: the exit code (2 for a
bad command line or configuration, errors.ExitCode), a message naming the field or file,
no traceback or "internal error", and nothing changed under the node's root.
"""
