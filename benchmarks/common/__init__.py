"""What every floor of the house uses, kept on the ground floor so any package may import it:
user-facing errors (`errors`), atomic file writes (`atomic_files`), registries by name
(`named_registry`), reading JSON input strictly (`json_input`), the record of what degraded
(`degradation`), secret redaction (`redaction`), collecting through a context variable
(`collect`), concurrent calls that stand or fall together (`tasks`), loopback sockets (`loopback`)
and the project's offline defaults for the libraries it drives (`offline`, applied by the entry
points: importing changes nothing)."""
