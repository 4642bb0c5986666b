"""Fixtures are not tests: no module under tests/ imports a test module (test_*.py). A helper
two test modules share lives in a fixture module named for what it holds (tests/*_fixtures.py,
tests/waiting.py, tests/contract/arm_specs.py ...), so that running, renaming or deleting one
test module never changes another, and no test is collected twice."""

import ast
import os

from tests.harness import REPO

TESTS = os.path.join(REPO, "tests")

# Left to move (module, the test module it imports). This list only shrinks: an entry that no
# longer offends fails the test too, so that it is deleted with the fix.
KNOWN = {
    ("tests/deb/test_bad_files.py", "tests.deb.test_maintscripts"),
    ("tests/deb/test_debconf.py", "tests.deb.test_maintscripts"),
    ("tests/deb/test_debconf.py", "tests.deb.test_templates"),
    ("tests/deb/test_maintscript_lib.py", "tests.deb.test_maintscripts"),
}


def _package(relpath):
    """The dotted package a module at `relpath` (from the repository root) belongs to."""
    return os.path.dirname(relpath).replace(os.sep, ".")


def imported_test_modules(source, relpath):
    """(line, imported test module) for every import of a test module in `source`: `import
    a.test_x`, `from a.test_x import y`, `from a import test_x`, and their relative forms.
    A test_* name imported from any module counts too: pytest would collect it again in the
    importer."""
    found = []
    for node in ast.walk(ast.parse(source, filename=relpath)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = _package(relpath).split(".")
                parent = parent[:len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            modules = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [(node.lineno, m) for m in modules if m.rsplit(".", 1)[-1].startswith("test_")]
    return found


def offenders():
    found = set()
    for dirpath, dirnames, filenames in os.walk(TESTS):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            relpath = os.path.relpath(path, REPO)
            with open(path, encoding="utf-8") as f:
                source = f.read()
            found |= {(relpath, line, module) for line, module in imported_test_modules(source, relpath)}
    return found


def test_no_module_under_tests_imports_a_test_module():
    found = offenders()
    new = sorted(f"{path}:{line} imports {module}" for path, line, module in found
                 if (path, module) not in KNOWN)
    assert not new, ("a test module used as a fixture library; move what is shared to a fixture "
                     "module under tests/:\n" + "\n".join(new))
    gone = sorted(KNOWN - {(path, module) for path, _, module in found})
    assert not gone, f"no longer imported, delete from KNOWN: {gone}"


def test_every_form_of_importing_a_test_module_is_found():
    source = "\n".join([
        "import tests.unit.test_a",
        "import tests.unit.test_b as b",
        "from tests.unit.test_c import helper",
        "from tests.unit import test_d",
        "from . import test_e",
        "from .test_f import helper",
        "from .. import test_g",
        "import pytest",
        "from tests.config_fixtures import make_root, test_like_name_of_a_function",
        "from tests.unit import helpers",
        "def f():",
        "    from tests.integration.test_h import helper",
    ])
    found = imported_test_modules(source, "tests/unit/test_x.py")
    assert found == [
        (1, "tests.unit.test_a"),
        (2, "tests.unit.test_b"),
        (3, "tests.unit.test_c"),
        (4, "tests.unit.test_d"),
        (5, "tests.unit.test_e"),
        (6, "tests.unit.test_f"),
        (7, "tests.test_g"),
        (9, "tests.config_fixtures.test_like_name_of_a_function"),
        (12, "tests.integration.test_h"),
    ]
