from lightspeed.cli import main

raise SystemExit(main())
