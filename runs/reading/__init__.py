"""Reading a run: its summary and outcome, report.html, the browser view, trace, compare."""
