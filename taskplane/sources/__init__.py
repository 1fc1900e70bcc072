"""Native sources: provider adapters that feed the plane's intake and receive results
through its outbound delivery (never the store)."""
