"""The 2026-07-28 façade: stateless modern clients over legacy servers (docs/modern.md)."""
