"""The SQLite backend of the task store (one database file per store root)."""
