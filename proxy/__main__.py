from __future__ import annotations

from proxy.cli_tools import main

raise SystemExit(main())
