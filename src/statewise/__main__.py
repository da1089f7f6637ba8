"""`python -m statewise ...`: the same command line as `statewise ...`."""

from statewise.cli import main

if __name__ == "__main__":
    main()
