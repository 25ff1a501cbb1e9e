"""The conformance kit (`atelier check memory|pipeline|judge|benchmark REF`): a protocol's contract
run on a system — built-in or a researcher's own — on the scripted model, each clause reported
held or broken with its evidence. The built-ins pass the same kit (tests/test_conformance.py)."""
