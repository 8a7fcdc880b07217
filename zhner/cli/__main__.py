"""`python -m zhner.cli ...` (and `torchrun ... -m zhner.cli train ...`): the same as the `zhner` script."""
from zhner.cli import main

if __name__ == "__main__":
    main()
