"""Loss laws fitted to a ladder of runs, and the table forecast they give."""
