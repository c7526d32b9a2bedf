"""Every declared figure, drawn from the selected runs with one look per model."""
