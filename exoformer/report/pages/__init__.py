"""What a reading verb hands a person: the HTML report, the run summary, a DataFrame."""
