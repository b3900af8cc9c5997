"""A pytest plugin, loaded first by the test command (pyproject.toml's addopts): the test
processes do without ``rfc3987_syntax``.

nbval imports nbformat, whose validator imports jsonschema, whose format checkers import
``rfc3987_syntax`` when it is installed (jupyterlab brings it, through jupyter-events'
``jsonschema[format-nongpl]``) to check the ``iri`` and ``iri-reference`` formats. Importing it
builds an Earley parser of RFC 3987's grammar: about 1.3 CPU-seconds in every test process (the
controller and each xdist worker), more than the rest of nbformat. No schema the tests validate
uses those formats (nbformat's notebook schemas have none: ``tests/tools/test_skip_iri_parser.py``
checks), and nbformat validates without a format checker anyway, so the tests lose nothing.
With the module marked absent, jsonschema's ``import`` fails and it leaves those two formats
unchecked, as it does where the package is not installed.
"""

from __future__ import annotations

import sys

# None in sys.modules makes `import rfc3987_syntax` raise ImportError, which jsonschema expects
# (it guards the import with contextlib.suppress(ImportError)); a process that imported it
# already keeps it.
sys.modules.setdefault("rfc3987_syntax", None)
