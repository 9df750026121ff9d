"""Evidence about a job's ranks, one module per source, each returning typed records."""
