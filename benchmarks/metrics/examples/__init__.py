"""Example inputs of `atelier metric`, one JSON file per metric (a package so they ship as package data)."""
