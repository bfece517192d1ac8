"""``python -m lightspeed``: the command line (:mod:`lightspeed.cli`).  Ctrl-C while it is still
importing ends like Ctrl-C later: "interrupted" and status 130, no traceback."""

import sys

try:
    from lightspeed.cli import main
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr, flush=True)
    raise SystemExit(130) from None

raise SystemExit(main())
