"""The multi-node preflight: nodes meet on torch's TCPStore, exchange sealed JSON facts, test the links
between them and share one verdict. Start at join.py (the entry) and PROTOCOL.md (the story)."""
