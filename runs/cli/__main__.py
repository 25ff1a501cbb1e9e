from runs.cli import main

main()
