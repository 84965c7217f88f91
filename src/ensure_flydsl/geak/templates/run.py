# The GEAK folder's launcher, written by `ensure-flydsl skill`: runs the ensure-flydsl vendored beside it.
# Python puts this file's folder first on sys.path, so the vendored packages are found without PYTHONPATH.
# Written for any python3, so that an old one is told what is wrong instead of failing on syntax.
import os
import sys

if sys.version_info < (3, 9):
    sys.stderr.write(
        "ensure-flydsl: python3 on PATH is %s (%d.%d); the GEAK folder's tool needs Python 3.9 or newer: "
        "put one first on PATH and run it again\n" % (sys.executable, sys.version_info[0], sys.version_info[1])
    )
    sys.exit(64)

_here = os.path.dirname(os.path.abspath(__file__))
if not os.access(_here, os.W_OK):
    # A read-only folder (a bind mount, an image layer): bytecode goes to the user's cache, not nowhere, so
    # every call does not compile the tool again.
    _cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    sys.pycache_prefix = os.path.join(_cache, "ensure-flydsl", "pycache")

from ensure_flydsl.support.install_route import set_launcher  # noqa: E402

_flags = [flag for flag, on in (("-E", sys.flags.ignore_environment), ("-s", sys.flags.no_user_site),
                                ("-S", sys.flags.no_site)) if on]
set_launcher([sys.executable, *_flags, os.path.abspath(__file__)])

from ensure_flydsl.cli.main import main  # noqa: E402

raise SystemExit(main())
