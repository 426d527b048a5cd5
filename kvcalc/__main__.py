# `python -m kvcalc` is the command line: the one module above cli/ that starts it.
from kvcalc.cli import main  # noqa: TID251

main()
