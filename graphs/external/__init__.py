"""The `external` pipeline: deep-research agents from outside this project as systems under test."""
