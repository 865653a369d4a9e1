"""blocktune service."""
