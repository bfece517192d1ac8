"""``python -m lightspeed``: the command line; Ctrl-C while it imports ends like one later (status 130)."""
import sys

try:
    from lightspeed.cli import main
except KeyboardInterrupt:
    sys.exit(print("interrupted", file=sys.stderr) or 130)
raise SystemExit(main())
