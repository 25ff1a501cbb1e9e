"""The experiment runner, recipes, reports and the CLI."""
