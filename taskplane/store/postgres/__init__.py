"""The PostgreSQL backend of the task store (psycopg 3, driven from worker threads)."""
