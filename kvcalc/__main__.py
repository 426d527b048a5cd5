from kvcalc.cli import main

main()
