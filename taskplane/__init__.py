"""taskplane: an A2A v1.0.1 HTTP+JSON task plane for a resident agent."""

__version__ = "0.1.0"
