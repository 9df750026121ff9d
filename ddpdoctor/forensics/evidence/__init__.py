"""Evidence of a job's ranks, one module per source, each returning ``model.RankState`` records."""
