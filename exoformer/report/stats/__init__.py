"""Statistics with no knowledge of runs: power, replication intervals, rank agreement, estimators."""
