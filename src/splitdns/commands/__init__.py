"""One module per command; each exposes typed functions that return an exit code."""
