"""Which run each reader reads, and where report outputs may be written."""
