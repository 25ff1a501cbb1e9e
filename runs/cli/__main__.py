from atelier.runs.cli import main

main()
