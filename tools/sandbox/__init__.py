"""The sandbox web: a document corpus served on loopback with SearXNG-compatible search and HTML pages."""
