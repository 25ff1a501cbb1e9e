"""mylab: an example of a researcher's own systems for Atelier (see examples/mylab/README.md)."""
