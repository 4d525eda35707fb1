"""`python -m splitdns` runs the command line."""

from splitdns.cli import main

raise SystemExit(main())
