"""``python -m lightspeed``: the command line; Ctrl-C while it imports ends like one later (status 130)."""
import os
import sys

try:
    from lightspeed.cli import entry
except KeyboardInterrupt:  # (nothing of ours runs at exit yet: cli.exit_interrupted's reasons, by hand)
    print("interrupted", file=sys.stderr, flush=True)
    os._exit(130)
entry()
