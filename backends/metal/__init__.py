"""The metal backend (see docs/)."""
