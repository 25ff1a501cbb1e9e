"""What a run folder holds, and the rules for reading and writing it: the recipe, results.jsonl,
epochs, the folder's layout, its lock, and what a resumed run may change."""
