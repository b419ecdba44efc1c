"""The config sections every program shares, and which keys a run reads."""
