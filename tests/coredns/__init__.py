"""CoreDNS's own test tables, ported as data (see NOTICE.md here)."""
