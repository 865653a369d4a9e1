"""blocktune db."""
