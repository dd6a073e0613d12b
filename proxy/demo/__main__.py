from __future__ import annotations

from proxy.demo.server import main

raise SystemExit(main())
