"""``python -m taskplane``: the command line of :mod:`taskplane.cli`."""

from taskplane.cli import main

if __name__ == "__main__":
    main()
